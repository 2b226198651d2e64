"""task=question_answering: strided windows and their start/end labels against transformers' own overflowing
tokenization and run_qa's labelling on a BERT tokenizer folder built locally, zoo's own framing, span
decoding against brute force, predictions mapped back to context characters across windows, the SQuAD
readers' errors, and exact match / F1 on examples worked by hand from the SQuAD v1.1 script's definition."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from zoo.data.qa import PairTemplate, QADataset, QAExamples, windows
from zoo.data.sources.squad import QAExample, check_example, encode_split, load_squad
from zoo.tasks import build_data, get_task
from zoo.tasks.evaluating import EvalOptions
from zoo.tasks.metrics import squad_exact_match, squad_f1, squad_normalize, squad_scores
from zoo.tasks.question_answering import best_span
from zoo.tokenizers import load_hf_tokenizer
from zoo.tokenizers.trained import train_bpe

from ..data.hf_folders import WORDS, corpus, make_bert

QA = get_task("question_answering")


def examples(n: int, seed: int = 0, words: int = (20, 60)) -> list[QAExample]:
    """`n` generated examples: a context of random words, the answer a run of 1-3 of its words."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        context = " ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))) + "."
        spans = [(m.start(), m.end()) for m in __import__("re").finditer(r"\S+", context)]
        first = rng.randrange(len(spans) - 1)
        start, end = spans[first][0], spans[min(first + rng.randint(0, 2), len(spans) - 2)][1]
        out.append(QAExample(f"what is {rng.choice(WORDS)} {rng.choice(WORDS)}?", context,
                             ((start, context[start:end]),)))
    return out


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return make_bert(tmp_path_factory.mktemp("bert"))


def run_qa_labels(enc, i: int, start_char: int, end_char: int) -> tuple[int, int]:
    """transformers' run_qa prepare_train_features: the answer's tokens in window `i`, else the CLS index. Its
    start loop is kept inside the context: run_qa's walks on into the closing [SEP] (offsets (0, 0)) when the
    answer begins on the window's last context token, and labels the [SEP] as the start, after the end."""
    ids, offsets, seq = enc["input_ids"][i], enc["offset_mapping"][i], enc.sequence_ids(i)
    first = seq.index(1)
    last = len(ids) - 1 - seq[::-1].index(1)
    if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
        return 0, 0
    context_end = last
    while first <= context_end and offsets[first][0] <= start_char:
        first += 1
    while offsets[last][1] >= end_char:
        last -= 1
    return first - 1, last + 1


@pytest.mark.parametrize("stride", [0, 3, 7])
def test_windows_and_labels_equal_transformers_run_qa(bert, stride):
    from transformers import AutoTokenizer

    tok, reference = load_hf_tokenizer(bert), AutoTokenizer.from_pretrained(bert)
    rows = examples(12, seed=stride)
    data = QADataset(QAExamples(encode_split(tok, rows, "train")), PairTemplate.of(tok), max_len=24,
                     doc_stride=stride)
    labelled = 0
    for e, ex in enumerate(rows):
        enc = reference(ex.question, ex.context, truncation="only_second", max_length=24, stride=stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True)
        mine = range(data.first_window[e], data.first_window[e + 1])
        assert len(mine) == len(enc["input_ids"]) > 1
        start, text = ex.answers[0]
        for i, k in enumerate(mine):
            item = data[k]
            assert item["input_ids"].tolist() == enc["input_ids"][i]
            assert item["token_type_ids"].tolist() == enc["token_type_ids"][i]
            assert (int(item["start_positions"]), int(item["end_positions"])) == run_qa_labels(enc, i, start,
                                                                                           start + len(text))
            labelled += int(item["start_positions"]) > 0
    assert 0 < labelled < len(data)  # answers inside some windows and outside others


def test_zoo_tokenizers_frame_bos_question_eos_context_eos():
    tok = train_bpe(corpus(), vocab_size=300)
    assert PairTemplate.of(tok) == PairTemplate((tok.bos_id,), (tok.eos_id,), (tok.eos_id,))
    rows = examples(6, seed=1)
    data = QADataset(QAExamples(encode_split(tok, rows, "train")), PairTemplate.of(tok), max_len=32,
                     doc_stride=4)
    for k in range(len(data)):
        item, w = data[k], data.windows[k]
        ids = item["input_ids"].tolist()
        question = tok.encode(rows[w.example].question)
        assert ids[: len(question) + 2] == [tok.bos_id, *question, tok.eos_id] and ids[-1] == tok.eos_id
        s, e = int(item["start_positions"]), int(item["end_positions"])
        if s:  # the labelled tokens spell the answer (byte-level pieces may carry its leading space)
            assert tok.decode(ids[s:e + 1]).strip() == rows[w.example].answers[0][1]


def test_windows_by_hand():
    assert windows(10, 4, 1) == [(0, 4), (3, 7), (6, 10)]
    assert windows(10, 4, 0) == [(0, 4), (4, 8), (8, 10)]
    assert windows(3, 4, 2) == [(0, 3)]
    with pytest.raises(ValueError, match=r"doc_stride=4 must be in \[0, 4\)"):
        windows(10, 4, 4)


def test_a_question_that_leaves_no_room_and_a_stride_too_long_are_refused():
    tok = train_bpe(corpus(), vocab_size=300)
    arrays = QAExamples(encode_split(tok, examples(2), "train"))
    q = len(arrays.question[0])
    with pytest.raises(ValueError,
                       match=f"example 0's question is {q} tokens; with 3 special tokens no context fits"):
        QADataset(arrays, PairTemplate.of(tok), max_len=q + 3, doc_stride=0)
    with pytest.raises(ValueError,
                       match=r"data.doc_stride=5 must be smaller than the 5 context tokens a window of "
                             r"example 0 holds"):
        QADataset(arrays, PairTemplate.of(tok), max_len=q + 3 + 5, doc_stride=5)


# -------------------------------------------------------------------------------------- decoding


def test_best_span_equals_brute_force():
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        t = int(torch.randint(1, 12, (1,), generator=gen))
        s, e = torch.randn(t, generator=gen), torch.randn(t, generator=gen)
        valid = torch.rand(t, generator=gen) > 0.2
        max_len = int(torch.randint(1, 5, (1,), generator=gen))
        allowed = [(float(s[i] + e[j]), i, j) for i, j in itertools.product(range(t), repeat=2)
                   if i <= j < i + max_len and valid[i] and valid[j]]
        expected = max(allowed, key=lambda x: x[0]) if allowed else (-math.inf, 0, 0)
        score, i, j = best_span(s, e, valid, max_len)
        assert (i, j) == expected[1:] and score == pytest.approx(expected[0])


def test_best_span_keeps_start_before_end_and_within_max_len():
    s = torch.tensor([0.0, 0.0, 9.0, 0.0, 0.0])
    e = torch.tensor([8.0, 0.0, 0.0, 0.0, 5.0])  # the best end comes before the best start
    assert best_span(s, e, torch.ones(5, dtype=torch.bool), 30)[1:] == (2, 4)
    assert best_span(s, e, torch.ones(5, dtype=torch.bool), 2)[1:] == (2, 2)  # end 4 is 3 tokens away


class PointAt(torch.nn.Module):
    """A stand-in QA model: start logit 5 on token `first`, end logit 5 on token `last`, 0 elsewhere."""

    def __init__(self, first: int, last: int) -> None:
        super().__init__()
        self.first, self.last, self.weight = first, last, torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, start_positions=None, end_positions=None,
                token_type_ids=None):
        return SimpleNamespace(start_logits=5.0 * (input_ids == self.first),
                               end_logits=5.0 * (input_ids == self.last), loss=torch.tensor(0.0))


def test_prediction_is_the_best_span_over_windows_cut_from_the_context(bert, tmp_path):
    """A context whose answer ("river quickly", with its original casing and spacing) lies only in a late
    window: the prediction is cut from the context characters, not decoded from tokens."""
    tok = load_hf_tokenizer(bert)
    context = "the zebra runs " * 12 + "Zoo under  River Quickly jumps " + "the lion eats " * 4
    row = {"question": "where?", "context": context,
           "answers": {"text": ["River Quickly"], "answer_start": [context.index("River")]}}
    path = tmp_path / "qa.jsonl"
    path.write_text((json.dumps(row) + "\n") * 4, encoding="utf-8")
    _, dm = build_data({"name": "squad", "path": str(path), "val_path": str(path), "doc_stride": 2},
                       {"name": "hf", "path": str(bert)}, task="question_answering", max_seq_len=20,
                       batch_size=3, cache_dir=tmp_path / "cache")
    model = PointAt(tok.hf.token_to_id("river"), tok.hf.token_to_id("quickly"))
    assert len(dm.datasets["val"]) > 4 * 3  # several windows per example, batches mixing examples
    metrics = QA.evaluate(model, tok, dm, "val", EvalOptions())
    predicted, gold = QA.references(model, tok, dm, 4)
    assert predicted == ["River Quickly"] * 4 and gold == [["River Quickly"]] * 4
    assert metrics["exact_match"] == 100.0 and metrics["f1"] == 100.0 and metrics["examples"] == 4
    dm.max_answer_len = 1  # one token: "River" and "Quickly" both score 5, the earliest start wins
    assert QA.predict(model, dm, "val", 1)[0] == ["River"]


# ----------------------------------------------------------------------------------------- readers


GOOD = {"question": "who?", "context": "Ann met Bo.", "answers": {"text": ["Bo"], "answer_start": [8]}}


@pytest.mark.parametrize(("answers", "message"), [
    ({"text": ["Bo"], "answer_start": [10]},
     "answers.answer_start[0]=10 + len(answers.text[0])=2 runs past the end of the context (11 characters)"),
    ({"text": ["Bo"], "answer_start": [4]},
     "answers.text[0]='Bo' is not the context's text at answers.answer_start[0]=4 "
     "(it reads 'me')"),
    ({"text": [], "answer_start": []},
     "answers.text is empty; every SQuAD v1.1 example has at least one answer"),
    ({"text": ["Bo", "Ann"], "answer_start": [8]}, "answers.text has 2 answers but answers.answer_start 1"),
    ({"text": ["Bo"], "answer_start": [-1]}, "answers.answer_start[0] must be an int >= 0, got -1"),
    (["Bo"], "field 'answers' must be {\"text\": [...], \"answer_start\": [...]}"),
])
def test_bad_answer_names_the_example_and_field(tmp_path, answers, message):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps({**GOOD, "answers": answers}) + "\n",
                    encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_squad(path=str(path), val_path=str(path))
    assert f"{path}:3 (example 1): {message}" in str(err.value)


def test_hf_squad_columns(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{**GOOD, "id": str(i)} for i in range(20)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    _, dm = build_data({"name": "hf", "path": str(tmp_path / "ds")}, {"name": "char"},
                       task="question_answering", max_seq_len=32, batch_size=2, cache_dir=tmp_path / "cache")
    assert dm.datasets["train"].examples.answers(0) == ["Bo"]
    datasets.Dataset.from_list([{**GOOD,
                                 "answers": {"text": ["Bo"], "answer_start": [3]}}] * 20).save_to_disk(
        str(tmp_path / "bad"))
    with pytest.raises(ValueError,
                       match=r"row 0 of split 'train' .*: answers.text\[0\]='Bo' is not the context's"):
        build_data({"name": "hf", "path": str(tmp_path / "bad")}, {"name": "char"}, task="question_answering",
                   max_seq_len=32, batch_size=2, cache_dir=tmp_path / "cache")


def test_check_example_keeps_every_answer():
    ex = check_example({**GOOD, "answers": {"text": ["Bo", "Bo."], "answer_start": [8, 8]}}, "x")
    assert ex.answers == ((8, "Bo"), (8, "Bo."))


def test_gold_answers_read_back_from_the_cache(tmp_path):
    rows = [{"question": "q?", "context": "Ann met Bo in Rome.", "answers": {"text": ["Bo", "Bo in Rome"],
                                                                               "answer_start": [8, 8]}}] * 6
    path = Path(tmp_path / "qa.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for _ in range(2):  # built, then read back from the cache
        _, dm = build_data({"name": "squad", "path": str(path)}, {"name": "char"}, task="question_answering",
                           max_seq_len=32, batch_size=2, cache_dir=tmp_path / "cache")
        ex = dm.datasets["val"].examples
        assert ex.context_text(0) == "Ann met Bo in Rome." and ex.answers(0) == ["Bo", "Bo in Rome"]


# ----------------------------------------------------------------------------------------- metrics


@pytest.mark.parametrize(("text", "normalized"), [
    ("The Denver Broncos!", "denver broncos"),
    ("  an   apple, a day ", "apple day"),
    ("banana theater another", "banana theater another"),  # articles only as whole words
    ("a.m.", "am"),  # punctuation goes first, then the articles ("a.m." never was the article a)
    ("the", ""),
    ("Café—Ünïcode", "café—ünïcode"),  # only ASCII punctuation is removed
])
def test_squad_normalize_by_hand(text, normalized):
    assert squad_normalize(text) == normalized


def test_squad_scores_by_hand():
    """Worked from the script: EM is max over golds of normalized equality; F1 of "Denver Broncos won" against
    "the Broncos" shares 1 token: P = 1/3, R = 1/1, F1 = 0.5; against ["Denver", "Broncos team"]: the best of
    F1(P=1/3, R=1) = 0.5 and F1(P=1/3, R=1/2) = 0.4 is 0.5; "the" against "a" normalizes to "" == "" (EM 1)
    with no shared token (F1 0)."""
    assert squad_scores(["Denver Broncos won"], ["the Broncos"]) == {"exact_match": 0.0,
                                                                     "f1": pytest.approx(50.0)}
    assert squad_f1(["Denver Broncos won"], [["Denver", "Broncos team"]]) == pytest.approx(50.0)
    assert squad_exact_match(["the"], ["a"]) == 100.0 and squad_f1(["the"], ["a"]) == 0.0
    predictions = ["Denver Broncos", "carolina", "Santa Clara, California", "February 7"]
    golds = [["Denver Broncos", "The Denver Broncos"], ["Carolina Panthers"],
             ["Levi's Stadium", "Santa Clara"], ["February 7, 2016"]]
    # F1: 1; carolina vs carolina panthers: P 1, R 1/2 -> 2/3; santa clara california vs santa clara: P 2/3,
    # R 1 -> 0.8; february 7 vs february 7 2016: P 1, R 2/3 -> 0.8
    assert squad_f1(predictions, golds) == pytest.approx(100 * (1 + 2 / 3 + 0.8 + 0.8) / 4)
    assert squad_exact_match(predictions, golds) == 25.0
    with pytest.raises(ValueError, match="reference 0 has no gold answer"):
        squad_f1(["x"], [[]])


# ---------------------------------------------------------------------------------- both architectures


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_a_step_and_an_evaluation_on_each_architecture(tmp_path, arch):
    from zoo.config import ModelConfig
    from zoo.presets import build

    from .conftest import write_squad

    tok, dm = build_data({"name": "squad", "path": str(write_squad(tmp_path / "qa.jsonl", 30))},
                         {"name": "char"}, task=QA, max_seq_len=48, batch_size=4,
                         cache_dir=tmp_path / "cache")
    model = build(QA.model_config(ModelConfig(arch=arch, head="qa", d_model=32, n_heads=2, n_layers=1,
                                              d_ff=64, max_seq_len=48), tok))
    batch = next(iter(dm.train_dataloader()))
    loss = QA.loss(model(**QA.model_inputs(batch)), batch)
    loss.backward()
    assert (torch.isfinite(loss)
            and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None))
    metrics = QA.evaluate(model, tok, dm, "val", EvalOptions(max_examples=2))
    assert metrics["examples"] == 2 and metrics["windows"] == dm.datasets["val"].first_window[2] > 2
    assert all(math.isfinite(v) for v in metrics.values())
