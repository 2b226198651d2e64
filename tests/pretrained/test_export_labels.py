"""A classifier's label names survive the Hugging Face export (issue 28 item 7):
`zoo.export(ckpt, format="hf")` writes the names the checkpoint was trained on as `id2label` / `label2id` (not
LABEL_0, LABEL_1), and a classifier trained from the `bert_small` preset (model.head=classifier) exports at
all."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

import zoo
from zoo.checkpoint import atomic_torch_save, zoo_section
from zoo.tokenizers.trained import train_char

SMALL = dict(d_model=32, n_layers=1, n_heads=4, max_seq_len=32)


def checkpoint(path, model, tokenizer, task: str):
    """A training-format checkpoint (what ZooLightningModule.on_save_checkpoint writes)."""
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    atomic_torch_save({"state_dict": state, "zoo": zoo_section(model.config, task, tokenizer)}, path)
    return path


@pytest.fixture
def classifier_ckpt(tmp_path):
    tokenizer = train_char(["def f(x): return x", "class A: pass"])
    tokenizer.label_names = ["def", "other"]
    model = zoo.build("bert_small", **SMALL, vocab_size=tokenizer.vocab_size,
                      head={"name": "classifier", "num_labels": 2})
    return checkpoint(tmp_path / "cls.ckpt", model.eval(), tokenizer, "classification")


def test_preset_classifier_exports_with_its_label_names(classifier_ckpt, tmp_path):
    out = zoo.export(classifier_ckpt, tmp_path / "hf", format="hf")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "def", "1": "other"} and config["label2id"] == {"def": 0, "other": 1}
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert hf.config.id2label == {0: "def", 1: "other"}
    model, _ = zoo.load(classifier_ckpt)
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4


def test_loaded_label_names_are_written_back_and_can_be_given(shipped, tmp_path):
    model = zoo.from_pretrained(shipped.folder("bert", "ForSequenceClassification"))
    given = zoo.save_pretrained(model, tmp_path / "given", label_names=["bad", "meh", "good"])
    assert (json.loads((given / "config.json").read_text())["id2label"]
            == {"0": "bad", "1": "meh", "2": "good"})
    with pytest.raises(ValueError, match=r"2 label names \['a', 'b'\] for a head of model.head.num_labels=3"):
        zoo.save_pretrained(model, tmp_path / "short", label_names=["a", "b"])
