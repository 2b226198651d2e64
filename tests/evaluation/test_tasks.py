"""evaluate() for the other tasks, each against an independent count: seq2seq BLEU / chrF / exact match
against sacrebleu on translations made here with the same decoding options, classification accuracy and
macro-F1 against per-example predictions, MLM masked-token accuracy against a count over the same windows."""

from __future__ import annotations

import json

import pytest
import sacrebleu
import torch

import zoo
from zoo.evaluation.run import evaluate
from zoo.tasks import build_data
from zoo.tasks.metrics import exact_match

from .conftest import write_checkpoint

TINY = dict(d_model=32, n_heads=2, d_ff=64, max_seq_len=24)


def _data(tmp_path, data_cfg, task):
    """The tokenizer and data module a checkpoint for `task` on `data_cfg` is built with."""
    return build_data(data_cfg, {"name": "char"}, task=task, max_seq_len=24, batch_size=4,
                      cache_dir=tmp_path / "c")


def test_seq2seq_scores_beam_translations_of_the_test_split(tmp_path, make_eval_cfg):
    data_cfg = {"name": "translation_toy", "n_pairs": 200, "n_test": 12}
    tok, dm = _data(tmp_path, data_cfg, "seq2seq")
    model = zoo.build("transformer_tiny", encoder_layers=1, decoder_layers=1, vocab_size=tok.vocab_size,
                      **TINY, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, dropout=0.0)
    ckpt = write_checkpoint(tmp_path / "s2s.ckpt", model, "seq2seq", tok)
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=translation_toy", "data.n_pairs=200",
                                     "data.n_test=12", "generation.num_beams=3",
                                     "generation.max_new_tokens=8", "max_examples=6", "batch_size=4",
                                     "output=null"]))
    assert report.split == "test" and report.metrics["examples"] == 6  # auto: the data has a test split
    dm.setup("fit")
    test = dm.datasets["test"]
    hyps = [tok.decode(model.generate([test.src[i].tolist()], num_beams=3, max_new_tokens=8,
                                      eos_token_id=tok.eos_id)[0]) for i in range(6)]
    refs = [tok.decode(test.tgt[i]) for i in range(6)]
    assert report.metrics["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert report.metrics["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert report.metrics["chrf"] > 0
    assert report.metrics["exact_match"] == pytest.approx(exact_match(hyps, refs))
    with torch.no_grad():  # teacher-forced NLL of the first 6 targets, one example at a time
        nll = sum(float(model(**{k: v[None] for k, v in test[i].items()}).loss) * len(test[i]["labels"])
                  for i in range(6))
    assert report.metrics["loss"] == pytest.approx(nll / sum(len(test[i]["labels"]) for i in range(6)),
                                                   rel=1e-5)


def test_classification_accuracy_and_macro_f1_by_hand(tmp_path, make_eval_cfg):
    path = tmp_path / "labelled.jsonl"
    words = {"pos": "good fine", "neg": "bad poor", "mix": "so so"}
    path.write_text("".join(json.dumps({"text": f"{words[y]} {i}", "label": y}) + "\n"
                            for i in range(60) for y in ("pos", "neg", "mix")))
    data_cfg = {"name": "classification", "path": str(path)}
    tok, dm = _data(tmp_path, data_cfg, "classification")
    model = zoo.build("bert_small", head={"name": "classifier", "num_labels": 3}, n_layers=1,
                      vocab_size=tok.vocab_size, **TINY, pad_id=tok.pad_id).eval()
    torch.manual_seed(0)
    dm.setup("fit")
    val = dm.datasets["val"]
    with torch.no_grad():  # weights far from the init, the head's bias centring the logits: several labels
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
        logits = torch.cat([model(val[i]["input_ids"][None]).logits for i in range(len(val))])  # (N, 3)
        model.head.proj.bias -= logits.mean(0)
        pred = [int(model(val[i]["input_ids"][None]).logits.argmax(-1)) for i in range(len(val))]
    ckpt = write_checkpoint(tmp_path / "cls.ckpt", model, "classification", tok)
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=classification", f"data.path={path}",
                                     "output=null"]))
    gold = [int(val[i]["labels"]) for i in range(len(val))]
    assert len(set(pred)) > 1 and report.metrics["examples"] == len(val)
    assert report.metrics["accuracy"] == pytest.approx(
        sum(p == g for p, g in zip(pred, gold, strict=True)) / len(val))
    f1 = []
    for c in range(3):
        tp = sum(p == c == g for p, g in zip(pred, gold, strict=True))
        wrong = sum((p == c) != (g == c) for p, g in zip(pred, gold, strict=True))
        f1.append(2 * tp / (2 * tp + wrong) if tp + wrong else 0.0)
    assert report.metrics["macro_f1"] == pytest.approx(sum(f1) / 3)


def test_mlm_masked_accuracy_by_hand(tmp_path, make_eval_cfg):
    corpus = tmp_path / "text.txt"
    corpus.write_text("".join(f"alpha beta gamma {i % 7} delta\n" for i in range(200)))
    tok, dm = _data(tmp_path, {"name": "text", "files": str(corpus)}, "mlm")
    model = zoo.build("bert_small", n_layers=1, vocab_size=tok.vocab_size, **TINY, pad_id=tok.pad_id).eval()
    ckpt = write_checkpoint(tmp_path / "mlm.ckpt", model, "mlm", tok)
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}", "output=null"]))
    dm.setup("fit")
    val = dm.datasets["val"]
    right = total = 0
    with torch.no_grad():
        for i in range(len(val)):
            guess = model(val[i]["input_ids"][None]).logits[0].argmax(-1)
            picked = val[i]["labels"] != -100
            right += int((guess[picked] == val[i]["labels"][picked]).sum())
            total += int(picked.sum())
    assert (total == report.metrics["tokens"]
            and report.metrics["masked_accuracy"] == pytest.approx(right / total))
