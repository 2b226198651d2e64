"""task=token_classification: word/tag alignment (first sub-token labelled, -100 elsewhere) against
transformers' own `word_ids` on a BERT tokenizer folder built locally, the framing and truncation of the
data set, the JSONL / data=hf readers and their errors, and entity scores against seqeval."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import seqeval.metrics as sm
import torch

from zoo.data.sources.base import split_rows
from zoo.data.sources.token_tags import load_token_tags, read_tagged
from zoo.data.tagging import TaggedDataset, align_words, first_tokens, word_spans
from zoo.tasks import build_data
from zoo.tasks.metrics import entity_scores
from zoo.tokenizers import load_hf_tokenizer
from zoo.tokenizers.trained import train_bpe
from zoo.utils import IGNORE_INDEX

from ..data.hf_folders import corpus, make_bert, make_roberta

SENTENCES = [["the", "zebra", "Runs", "quickly", "under", "the", "river"], ["Hello", "world", "!"],
             ["나는", "사과를", "먹었다", "🦓"], ["unbelievably", "zoo", "x"]]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return make_bert(tmp_path_factory.mktemp("bert"))


def first_subtoken_labels(word_ids: list[int | None], tags: list[int]) -> list[int]:
    """transformers' run_ner labelling (label_all_tokens=False): a word's tag on its first sub-token."""
    out, previous = [], None
    for w in word_ids:
        out.append(IGNORE_INDEX if w is None or w == previous else tags[w])
        previous = w
    return out


def test_alignment_equals_transformers_word_ids_on_a_bert_folder(bert):
    from transformers import AutoTokenizer

    tok, reference = load_hf_tokenizer(bert), AutoTokenizer.from_pretrained(bert)
    tags = [list(range(len(words))) for words in SENTENCES]
    ids, labels = align_words(tok, SENTENCES, tags)
    data = TaggedDataset(ids, labels, max_len=64, specials=tok.specials)
    for i, (words, t) in enumerate(zip(SENTENCES, tags, strict=True)):
        enc = reference(words, is_split_into_words=True)
        assert data[i]["input_ids"].tolist() == enc["input_ids"]  # [CLS] ... [SEP], the same sub-tokens
        assert data[i]["labels"].tolist() == first_subtoken_labels(enc.word_ids(), t)
    assert any(len(reference.tokenize(w)) > 1 for w in SENTENCES[3])  # some word has several sub-tokens


def test_byte_level_bpe_words_get_their_joined_text_ids():
    """zoo's byte-level BPE: the ids the joined sentence gets, the tag on each word's first piece (the first
    piece whose decoded prefix reaches into the word: a lone space piece belongs to no word), -100 on the
    rest."""
    tok = train_bpe(corpus(), vocab_size=300)
    words = ["zebra", "unbelievably", "runs", "🦓"]
    ids, labels = align_words(tok, [words], [[5, 6, 7, 8]])
    row = ids[0].tolist()
    assert row == tok.encode(" ".join(words))
    reach = [len(tok.decode(row[: k + 1])) for k in range(len(row))]  # characters spelled through piece k
    firsts = [next(k for k in range(len(row)) if reach[k] > start) for start, _ in word_spans(words)]
    assert labels.tolist() == [[5, 6, 7, 8][firsts.index(k)] if k in firsts else IGNORE_INDEX
                               for k in range(len(row))]
    # the space before "unbelievably" is a piece of its own
    assert tok.hf.id_to_token(row[firsts[1] - 1]) == "Ġ"


def test_first_tokens_by_character_overlap():
    spans = word_spans(["ab", "c", "de"])  # "ab c de"
    assert spans == [(0, 2), (3, 4), (5, 7)]
    # pieces: "a" "b" " " "c" " d" "e" (a lone space piece belongs to no word; " d" begins "de")
    assert first_tokens([(0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (6, 7)], spans, "x") == [0, 3, 4]
    with pytest.raises(ValueError, match="x: word 1 encodes to no token of its own"):
        first_tokens([(0, 2), (5, 7)], spans, "x")
    with pytest.raises(ValueError, match="words 0 and 1 begin in the same token"):
        first_tokens([(0, 4), (5, 7)], spans, "x")


def test_framing_and_truncation_keep_labels_on_real_tokens(bert):
    tok = load_hf_tokenizer(bert)
    ids, labels = align_words(tok, [SENTENCES[0]], [[1, 2, 3, 4, 5, 6, 7]])
    cut = TaggedDataset(ids, labels, max_len=5, specials=tok.specials)[0]  # [CLS] + 3 tokens + [SEP]
    assert cut["input_ids"].tolist() == [tok.cls_id, *ids[0][:3].tolist(), tok.sep_id]
    assert cut["labels"].tolist() == [IGNORE_INDEX, *labels[:3].tolist(), IGNORE_INDEX]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(("row", "message"), [
    ({"tokens": ["a", "b"], "tags": ["O"]}, "field 'tags' must hold one tag per word (2 words), got 1 tags"),
    ({"tokens": ["a", "b"], "tags": ["O", "PER"]},
     "tags[1]: tag 'PER' is not an IOB2 tag; allowed: 'O', 'B-<type>'"),
    ({"tokens": ["a", " "], "tags": ["O", "O"]}, "tokens[1] must be a non-blank string, got ' '"),
    ({"tokens": [], "tags": []}, "field 'tokens' must be a non-empty list of words"),
    ({"tokens": ["a"]}, "missing field(s) ['tags']"),
])
def test_bad_jsonl_names_line_and_field(tmp_path, row, message):
    path = write_jsonl(tmp_path / "t.jsonl", [{"tokens": ["ok"], "tags": ["O"]}, row])
    with pytest.raises(ValueError) as err:
        read_tagged(path)
    assert f"{path}:2" in str(err.value) and message in str(err.value)


def test_label_names_are_the_training_tags_sorted(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"tokens": ["Ann", "x"], "tags": ["B-PER", "O"]},
                                                   {"tokens": ["in", "Rome"], "tags": ["O", "B-LOC"]}])
    val = write_jsonl(tmp_path / "val.jsonl", [{"tokens": ["Bo"], "tags": ["B-PER"]}])
    corpus_ = load_token_tags(path=str(train), val_path=str(val))
    assert corpus_.label_names == ["B-LOC", "B-PER", "O"]
    assert corpus_.train == [(["Ann", "x"], [1, 2]), (["in", "Rome"], [2, 0])]
    assert corpus_.val == [(["Bo"], [1])]


def test_a_tag_found_only_in_validation_is_refused_naming_it_the_file_and_line(tmp_path):
    """The model could never predict it (evaluate.py refuses the same mismatch): one error before training."""
    train = write_jsonl(tmp_path / "train.jsonl", [{"tokens": ["Ann", "x"], "tags": ["B-PER", "O"]}] * 3)
    val = write_jsonl(tmp_path / "val.jsonl", [{"tokens": ["Bo"], "tags": ["B-PER"]},
                                               {"tokens": ["in", "Rome"], "tags": ["O", "B-LOC"]}])
    with pytest.raises(ValueError) as err:
        load_token_tags(path=str(train), val_path=str(val))
    assert str(err.value).startswith(
        f"{val}:2: tags[1]: tag 'B-LOC' is in the validation data but not in the training data "
        f"(data.path={train}), which has labels ['B-PER', 'O']; the model could never predict it")
    one_file = write_jsonl(tmp_path / "all.jsonl", [{"tokens": ["Ann"], "tags": ["B-PER"]}] * 9
                           + [{"tokens": ["Rome"], "tags": ["B-LOC"]}])
    seed = next(s for s in range(50) if 9 in split_rows(list(range(10)), 0.5, s)[1])  # line 10 held out
    with pytest.raises(ValueError) as err:
        load_token_tags(path=str(one_file), val_fraction=0.5, seed=seed)
    assert str(err.value).startswith(f"{one_file}:10: tags[0]: tag 'B-LOC' is in the validation data but not "
                                     f"in the training data (the rest of data.path={one_file}")


def test_hf_sequence_classlabel_tags_are_named(tmp_path):
    datasets = pytest.importorskip("datasets")
    names = ["O", "B-PER", "I-PER"]
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})
    rows = {"tokens": [["Ann", "Lee", "ran"], ["Bo", "sat"]] * 20, "ner_tags": [[1, 2, 0], [1, 0]] * 20}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "ds"))
    tok, dm = build_data({"name": "hf", "path": str(tmp_path / "ds")}, {"name": "char"},
                         task="token_classification", max_seq_len=32, batch_size=2,
                         cache_dir=tmp_path / "cache")
    assert tok.label_names == ["B-PER", "I-PER", "O"]
    first = dm.datasets["train"][0]
    words = tok.decode(first["input_ids"])
    tags = [tok.label_names[y] for y in first["labels"].tolist() if y != IGNORE_INDEX]
    assert tags == {"Ann Lee ran": ["B-PER", "I-PER", "O"], "Bo sat": ["B-PER", "O"]}[words]
    bad = {"tokens": [["Ann"]] * 20, "ner_tags": [["O"]] * 19 + [["PER"]]}  # strings: no ClassLabel
    datasets.Dataset.from_dict(bad).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError,
                       match=r"row 19 of .*data.tags_field='ner_tags'\): "
                             r"ner_tags\[0\]: tag 'PER' is not an IOB2"):
        build_data({"name": "hf", "path": str(tmp_path / "bad")}, {"name": "char"},
                   task="token_classification", max_seq_len=32, batch_size=2, cache_dir=tmp_path / "cache")


def test_hf_tag_found_only_in_the_validation_split_is_refused(tmp_path):
    datasets = pytest.importorskip("datasets")
    splits = {"train": {"tokens": [["Ann", "ran"]] * 4, "ner_tags": [["B-PER", "O"]] * 4},
              "validation": {"tokens": [["Ann"], ["in", "Rome"]], "ner_tags": [["B-PER"], ["O", "B-LOC"]]}}
    datasets.DatasetDict({k: datasets.Dataset.from_dict(v) for k, v in splits.items()}).save_to_disk(
        str(tmp_path / "ds"))
    with pytest.raises(ValueError, match=r"^row 1 of split 'validation' of .*'ner_tags'\): ner_tags\[1\]: "
                                         r"tag 'B-LOC' is in the validation data but not in the training "
                                         r"data \(split 'train' of .*\), which has labels \['B-PER', 'O'\]"):
        build_data({"name": "hf", "path": str(tmp_path / "ds"), "val_split": "validation"}, {"name": "char"},
                   task="token_classification", max_seq_len=32, batch_size=2, cache_dir=tmp_path / "cache")


def test_cache_arrays_round_trip(tmp_path):
    rows = [{"tokens": words, "tags": ["O"] * len(words)} for words in SENTENCES] * 3
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    cfg = {"name": "token_tags", "path": str(path)}
    tok, dm = build_data(cfg, {"name": "char"}, task="token_classification", max_seq_len=64, batch_size=2,
                         cache_dir=tmp_path / "cache")
    again = build_data(cfg, {"name": "char"}, task="token_classification", max_seq_len=64, batch_size=2,
                       cache_dir=tmp_path / "cache")[1]  # a cache hit: the arrays read back from disk
    for split in ("train", "val"):
        for i in range(len(dm.datasets[split])):
            a, b = dm.datasets[split][i], again.datasets[split][i]
            assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
            words = tok.decode(a["input_ids"]).split(" ")
            assert int((a["labels"] != IGNORE_INDEX).sum()) == len(words)  # one label per word


def test_roberta_words_after_the_first_begin_with_their_space_piece(tmp_path):
    tok = load_hf_tokenizer(make_roberta(tmp_path / "roberta"))
    ids, labels = align_words(tok, [["hello", "world"]], [[0, 1]])
    pieces = [tok.hf.id_to_token(i) for i in ids[0].tolist()]
    assert pieces[np.flatnonzero(labels == 1)[0]].startswith("Ġ")


# ------------------------------------------------------------------------------------------- metrics

GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "I-ORG", "O"], ["B-LOC", "O"]]
PRED = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG", "I-ORG", "O", "O"], ["I-LOC", "O"]]


def test_entity_scores_by_hand():
    """Gold entities: PER(0-1), LOC(3), ORG(1-3), LOC(0) = 4; predicted: PER(0-1), ORG(3), ORG(1-2), and
    I-LOC after nothing starts LOC(0) in seqeval's default mode = 4; right: PER(0-1), LOC(0) = 2."""
    scores = entity_scores(GOLD, PRED)
    assert scores["precision"] == pytest.approx(2 / 4) and scores["recall"] == pytest.approx(2 / 4)
    assert scores["f1"] == pytest.approx(0.5)
    assert scores["accuracy"] == pytest.approx(8 / 11)  # 11 words, wrong: LOC/ORG, I-ORG/O, B-LOC/I-LOC


def test_entity_scores_equal_seqeval_on_random_tag_sequences():
    rng = np.random.default_rng(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
    for _ in range(20):
        lengths = rng.integers(1, 12, size=8)
        gold = [[tags[t] for t in rng.integers(0, 7, size=n)] for n in lengths]
        pred = [[tags[t] for t in rng.integers(0, 7, size=n)] for n in lengths]
        scores = entity_scores(gold, pred)
        assert scores["precision"] == sm.precision_score(gold, pred)
        assert scores["recall"] == sm.recall_score(gold, pred)
        assert scores["f1"] == sm.f1_score(gold, pred)
        assert scores["accuracy"] == sm.accuracy_score(gold, pred)


def test_entity_scores_with_no_predicted_entity_are_zero_and_lengths_must_match():
    assert entity_scores([["B-PER"]], [["O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0,
                                                   "accuracy": 0.0}
    with pytest.raises(ValueError, match="sentence 0 has 2 gold tags but 1 predicted"):
        entity_scores([["O", "O"]], [["O"]])


def test_missing_seqeval_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "seqeval.metrics", None)
    with pytest.raises(ImportError, match=r"need seqeval: pip install 'zoo\[ner\]'"):
        entity_scores([["O"]], [["O"]])


# ---------------------------------------------------------------------------------- both architectures


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_a_step_and_an_evaluation_on_each_architecture(tmp_path, arch):
    from zoo.config import ModelConfig
    from zoo.presets import build
    from zoo.tasks import get_task
    from zoo.tasks.evaluating import EvalOptions

    from .conftest import write_tagged

    task = get_task("token_classification")
    tok, dm = build_data({"name": "token_tags", "path": str(write_tagged(tmp_path / "t.jsonl", 40))},
                         {"name": "char"}, task=task, max_seq_len=48, batch_size=4,
                         cache_dir=tmp_path / "cache")
    cfg = ModelConfig(arch=arch, head="token_classifier", d_model=32, n_heads=2, n_layers=1, d_ff=64,
                      max_seq_len=48)
    model = build(task.model_config(cfg, tok))
    assert model.config.head.num_labels == len(tok.label_names) == 5
    batch = next(iter(dm.train_dataloader()))
    loss = task.loss(model(**task.model_inputs(batch)), batch)
    loss.backward()
    assert (torch.isfinite(loss)
            and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None))
    metrics = task.evaluate(model, tok, dm, "val", EvalOptions())
    assert metrics["examples"] == len(dm.datasets["val"]) and all(math.isfinite(v) for v in metrics.values())


# ---------------------------------------------------------------------------- validation entity scores


def test_entity_metric_equals_seqeval_over_batches_and_merged_processes():
    """EntityScore (val/precision, recall, f1) against seqeval on the same tag sequences: random logits and
    tags, -100 on sub-tokens and padding, batches split over two 'processes' whose states are merged."""
    from types import SimpleNamespace

    from zoo.tasks.token_classification import EntityScore

    names = ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]
    gen = torch.Generator().manual_seed(0)
    batches, gold, predicted = [], [], []
    for _ in range(6):
        logits = torch.randn(4, 9, len(names), generator=gen)  # (B, T, num_labels)
        labels = torch.randint(0, len(names), (4, 9), generator=gen)
        labels[torch.rand(4, 9, generator=gen) < 0.3] = -100
        batches.append((SimpleNamespace(logits=logits), {"labels": labels}))
        for row, guess in zip(labels, logits.argmax(-1), strict=True):
            gold.append([names[i] for i in row[row != -100].tolist()])
            predicted.append([names[i] for i in guess[row != -100].tolist()])
    expected = {"precision": sm.precision_score(gold, predicted), "recall": sm.recall_score(gold, predicted),
                "f1": sm.f1_score(gold, predicted)}
    assert 0 < expected["f1"] < 1
    for score, value in expected.items():
        one, other = EntityScore(names, score), EntityScore(names, score)
        for k, (out, batch) in enumerate(batches):
            (one if k % 2 == 0 else other).update(out, batch)
        whole = EntityScore(names, score)
        for out, batch in batches:
            whole.update(out, batch)
        assert float(whole.compute()) == pytest.approx(value), score
        one.merge_state(other)  # what DDP's cat gathering does: the sentences of both, per sentence
        assert float(one.compute()) == pytest.approx(value), score


def test_validation_entity_scores_cover_the_whole_split_as_evaluate(tmp_path):
    """Was: val/precision, recall, f1 came from the exact_match callback over its first max_examples (200)
    sentences only (the module logged val/accuracy alone). Now the module logs all four over every validation
    sentence, equal to evaluate's numbers on the split and to seqeval on the tags it predicts."""
    import lightning as L

    from zoo.config import ModelConfig
    from zoo.presets import build
    from zoo.tasks import get_task
    from zoo.tasks.evaluating import EvalOptions
    from zoo.training.module import ZooLightningModule

    from .conftest import write_tagged

    task = get_task("token_classification")
    tok, dm = build_data({"name": "token_tags", "path": str(write_tagged(tmp_path / "t.jsonl", 120))},
                         {"name": "char"}, task=task, max_seq_len=48, batch_size=4,
                         cache_dir=tmp_path / "cache")
    torch.manual_seed(0)
    cfg = ModelConfig(arch="encoder", head="token_classifier", d_model=32, n_heads=2, n_layers=1, d_ff=64,
                      max_seq_len=48)
    model = build(task.model_config(cfg, tok))
    module = ZooLightningModule(model, task=task, tokenizer=tok, optim={"name": "adamw", "lr": 1e-3},
                                scheduler={"name": "constant"})
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.validate(module, datamodule=dm, verbose=False)
    logged = {k: float(v) for k, v in trainer.callback_metrics.items()}
    report = task.evaluate(model.eval(), tok, dm, "val", EvalOptions())
    gold, predicted, _, _ = task.tag_sequences(model, dm, "val", None)
    assert report["examples"] == len(gold) == len(dm.datasets["val"]) > 4  # more than one batch
    assert report["precision"] == pytest.approx(sm.precision_score(gold, predicted))
    assert report["precision"] > 0  # the random model predicts some entities: the scores are not all 0
    for name in ("precision", "recall", "f1", "accuracy"):
        assert logged[f"val/{name}"] == pytest.approx(report[name]), name
