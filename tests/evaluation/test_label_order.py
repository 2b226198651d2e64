"""evaluate.py on a checkpoint whose label names are not the data's sorted order (a head kept from an
init_from folder keeps its id2label order, zoo.finetune.labels): the data is indexed in the checkpoint's
order, scored against gold labels mapped by name by hand."""

from __future__ import annotations

import json

import pytest
import torch

import zoo
from zoo.evaluation.run import evaluate
from zoo.tasks import build_data

from .conftest import write_checkpoint

TINY = dict(d_model=32, n_heads=2, d_ff=64, max_seq_len=24)


def test_a_checkpoint_in_its_own_label_order_is_scored_by_name(tmp_path, make_eval_cfg):
    path = tmp_path / "labelled.jsonl"
    words = {"pos": "good fine", "neg": "bad poor", "mix": "so so"}
    path.write_text("".join(json.dumps({"text": f"{words[y]} {i}", "label": y}) + "\n"
                            for i in range(60) for y in ("pos", "neg", "mix")))
    tok, dm = build_data({"name": "classification", "path": str(path)}, {"name": "char"},
                         task="classification", max_seq_len=24, batch_size=4, cache_dir=tmp_path / "c")
    data_names, trained = list(tok.label_names), ["pos", "neg", "mix"]  # sorted: mix, neg, pos
    model = zoo.build("bert_small", head={"name": "classifier", "num_labels": 3}, n_layers=1,
                      vocab_size=tok.vocab_size, **TINY, pad_id=tok.pad_id).eval()
    torch.manual_seed(0)
    val = dm.datasets["val"]
    with torch.no_grad():  # several labels predicted
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
        logits = torch.cat([model(val[i]["input_ids"][None]).logits for i in range(len(val))])  # (N, 3)
        model.head.proj.bias -= logits.mean(0)
        pred = [int(model(val[i]["input_ids"][None]).logits.argmax(-1)) for i in range(len(val))]
    tok.label_names = trained
    ckpt = write_checkpoint(tmp_path / "cls.ckpt", model, "classification", tok)
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=classification", f"data.path={path}",
                                     "output=null"]))
    gold = [trained.index(data_names[int(val[i]["labels"])]) for i in range(len(val))]  # by name
    assert len(set(pred)) > 1 and data_names != trained
    assert report.metrics["accuracy"] == pytest.approx(
        sum(p == g for p, g in zip(pred, gold, strict=True)) / len(val))
