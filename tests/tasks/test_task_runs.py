"""token_classification and question_answering end to end: train.py's `train()` on small generated data with
a BERT tokenizer folder built locally, then evaluate.py's `evaluate()` on the checkpoint; both recounted
independently: the checkpoint run on transformers' own tokenization (word_ids; overflowing strided windows
with offsets), scored with seqeval / a brute-force span search and the SQuAD v1.1 formulas."""

from __future__ import annotations

import json
import math

import pytest
import seqeval.metrics as sm
import torch

import zoo
from zoo.evaluation.run import evaluate
from zoo.tasks.metrics import squad_exact_match, squad_f1
from zoo.training.run import train

from ..data.hf_folders import WORDS, make_bert
from ..training.conftest import read_csv_metrics
from .conftest import compose_eval, write_squad, write_tagged

pytestmark = pytest.mark.e2e

PEOPLE, PLACES = ["zebra", "lion", "apple"], ["river", "zoo", "world"]
FILLER = [w for w in WORDS if w not in {*PEOPLE, *PLACES}]
TINY_BERT = ["model=bert_small", "model.n_layers=2", "model.d_model=32", "model.n_heads=2", "model.d_ff=64",
             "model.dropout=0.0", "logger=csv", "batch_size=16", "trainer.num_sanity_val_steps=0",
             "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1", "optim.lr=3e-3",
             "scheduler.warmup_steps=2"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return make_bert(tmp_path_factory.mktemp("bert"))


def val_metrics(run_dir) -> list[dict[str, float]]:
    """Each validation's logged values, in order."""
    return [{k: float(v) for k, v in row.items() if k.startswith("val/") and v}
            for row in read_csv_metrics(run_dir) if row.get("val/loss")]


def test_token_classification_trains_and_evaluates(make_cfg, tmp_path, cache_dir, bert):
    from transformers import AutoTokenizer

    train_file = write_tagged(tmp_path / "train.jsonl", 400, seed=0, people=PEOPLE, places=PLACES,
                              filler=FILLER)
    val_file = write_tagged(tmp_path / "val.jsonl", 40, seed=1, people=PEOPLE, places=PLACES, filler=FILLER)
    data = ["data=token_tags", f"data.path={train_file}", f"data.val_path={val_file}"]
    result = train(make_cfg([*TINY_BERT, "model.head=token_classifier", "task=token_classification", *data,
                             "tokenizer=hf", f"tokenizer.path={bert}", "trainer.max_steps=40",
                             "eval_every=20"]))
    logged = val_metrics(result.output_dir)
    assert len(logged) == 2 and logged[-1]["val/loss"] < logged[0]["val/loss"]
    report = evaluate(compose_eval([f"ckpt={result.last_checkpoint}", *data, "output=null"], tmp_path,
                                   cache_dir))

    model, tok = zoo.load(result.last_checkpoint)
    assert tok.label_names == ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"] and model.config.head.num_labels == 5
    reference = AutoTokenizer.from_pretrained(bert)
    gold, predicted = [], []
    with torch.no_grad():
        for line in val_file.read_text().splitlines():
            row = json.loads(line)
            enc = reference(row["tokens"], is_split_into_words=True, return_tensors="pt")
            guesses = model.eval()(enc["input_ids"], attention_mask=enc["attention_mask"],
                                   token_type_ids=enc["token_type_ids"]).logits[0].argmax(-1).tolist()
            words = enc.word_ids()
            firsts = [k for k, w in enumerate(words) if w is not None and (k == 0 or words[k - 1] != w)]
            gold.append(row["tags"])
            predicted.append([tok.label_names[guesses[k]] for k in firsts])
    expected = {"precision": sm.precision_score(gold, predicted), "recall": sm.recall_score(gold, predicted),
                "f1": sm.f1_score(gold, predicted), "accuracy": sm.accuracy_score(gold, predicted)}
    for name, value in expected.items():
        assert report.metrics[name] == pytest.approx(value), name
    for name in ("precision", "recall", "f1", "accuracy"):  # the last validation ran on the same weights
        assert logged[-1][f"val/{name}"] == pytest.approx(expected[name]), name
    assert report.metrics["examples"] == 40 and expected["f1"] > 0.5
    print("token_classification:", report.metrics)


def brute_force_answer(model, reference, question: str, context: str, max_len: int, stride: int,
                       max_answer_len: int) -> str:
    """The best span over transformers' overflowing windows: every (start <= end < start + max_answer_len)
    pair of context tokens tried in order, scored start + end logit; cut from the context by the offsets."""
    enc = reference(question, context, truncation="only_second", max_length=max_len, stride=stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
    best, span = -math.inf, (0, 0)
    for w, ids in enumerate(enc["input_ids"]):
        out = model(torch.tensor([ids]), token_type_ids=torch.tensor([enc["token_type_ids"][w]]))
        start, end = out.start_logits[0].tolist(), out.end_logits[0].tolist()
        context_tokens = [k for k, s in enumerate(enc.sequence_ids(w)) if s == 1]
        offsets = enc["offset_mapping"][w]
        for i in context_tokens:
            for j in context_tokens:
                if i <= j < i + max_answer_len and start[i] + end[j] > best:
                    best, span = start[i] + end[j], (offsets[i][0], offsets[j][1])
    return context[span[0]:span[1]]


def test_question_answering_trains_and_evaluates(make_cfg, tmp_path, cache_dir, bert):
    from transformers import AutoTokenizer

    kwargs = dict(length=(6, 24), people=PEOPLE, places=PLACES, filler=FILLER)
    train_file = write_squad(tmp_path / "train.jsonl", 300, seed=0, **kwargs)
    val_file = write_squad(tmp_path / "val.jsonl", 30, seed=1, **kwargs)
    data = ["data=squad", f"data.path={train_file}", f"data.val_path={val_file}", "data.doc_stride=8",
            "data.max_answer_len=5"]
    result = train(make_cfg([*TINY_BERT, "model.head=qa", "task=question_answering", *data,
                             "model.max_seq_len=40", "tokenizer=hf", f"tokenizer.path={bert}",
                             "trainer.max_steps=40", "eval_every=20"]))
    logged = val_metrics(result.output_dir)
    assert len(logged) == 2 and logged[-1]["val/loss"] < logged[0]["val/loss"]
    report = evaluate(compose_eval([f"ckpt={result.last_checkpoint}", *data, "output=null"], tmp_path,
                                   cache_dir))

    model, _ = zoo.load(result.last_checkpoint)
    reference = AutoTokenizer.from_pretrained(bert)
    rows = [json.loads(line) for line in val_file.read_text().splitlines()]
    with torch.no_grad():
        predicted = [brute_force_answer(model.eval(), reference, r["question"], r["context"], 40, 8, 5)
                     for r in rows]
    gold = [r["answers"]["text"] for r in rows]
    windows = sum(len(reference(r["question"], r["context"], truncation="only_second", max_length=40,
                                stride=8, return_overflowing_tokens=True)["input_ids"]) for r in rows)
    assert report.metrics["examples"] == 30 and report.metrics["windows"] == windows > 30
    assert report.metrics["exact_match"] == pytest.approx(squad_exact_match(predicted, gold))
    assert report.metrics["f1"] == pytest.approx(squad_f1(predicted, gold))
    assert logged[-1]["val/exact_match"] == pytest.approx(report.metrics["exact_match"])
    assert logged[-1]["val/f1"] == pytest.approx(report.metrics["f1"])
    print("question_answering:", report.metrics)
