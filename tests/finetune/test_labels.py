"""init_from of a folder whose labelled head is reused (BertForSequenceClassification,
BertForTokenClassification): the data's labels are indexed in the folder's id2label order, through the
functions train.py calls (prepare, read_init, build_data, align_labels, model_config, final_config,
build_model). The reference is the transformers model of the folder: its id2label names its logits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.finetune.labels import generic_names, order_labels
from zoo.finetune.setup import align_labels, build_model, final_config, read_init
from zoo.tasks import build_data
from zoo.training.plan import prepare

TEXTS = {"positive": ["def add(a, b):", "def f(x):"], "negative": ["import os", "print(i)"],
         "neutral": ["class Point:", "return a + b"]}


def head_folder(folder: Path, bert: Path, names: list[str], kind: str = "sequence") -> Path:
    """A transformers Bert*Classification folder with id2label `names` on the tiny BERT and its tokenizer."""
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
        BertForTokenClassification,
    )

    cls = BertForSequenceClassification if kind == "sequence" else BertForTokenClassification
    config = BertConfig.from_pretrained(bert, id2label=dict(enumerate(names)),
                                        label2id={n: i for i, n in enumerate(names)})
    torch.manual_seed(1)
    cls(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(bert).save_pretrained(folder)
    return folder


def labelled(folder: Path, counts: dict[str, int]) -> Path:
    """Classification JSONL with `counts[label]` rows of each label (texts fixed per label)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"text": TEXTS[label][i % 2], "label": label} for label, n in counts.items() for i in range(n)]
    (file := folder / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                                 encoding="utf-8")
    return file


def up_to_model(cfg):
    """What train.py does before it trains: (plan, tokenizer, datamodule, model)."""
    plan = prepare(cfg)
    init = read_init(plan.init, plan.output_dir)
    tokenizer, datamodule = build_data(plan.data_cfg, init.tokenizer_cfg or plan.tokenizer_cfg,
                                       task=plan.task, max_seq_len=plan.model.max_seq_len, batch_size=4,
                                       cache_dir=cfg.paths.cache_dir, seed=cfg.seed)
    align_labels(plan.init, tokenizer, datamodule)
    config = final_config(plan.init, plan.task.model_config(plan.model, tokenizer), tokenizer)
    model, _ = build_model(plan.init, init.state, config, {"name": "full"})
    return plan, tokenizer, datamodule, model


def all_labels(datamodule) -> np.ndarray:
    return np.concatenate([np.asarray(labels) for _, labels in datamodule.examples.values()])


def same_logits(model, folder: Path, kind: str = "sequence") -> None:
    """zoo's logits equal the folder's transformers model's on one text: output i means id2label[i] in
    both."""
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    auto = AutoModelForSequenceClassification if kind == "sequence" else AutoModelForTokenClassification
    hf = auto.from_pretrained(folder).eval()
    ids = AutoTokenizer.from_pretrained(folder)("def add(a, b):", return_tensors="pt")
    with torch.no_grad():
        ours = model.eval()(ids.input_ids, attention_mask=ids.attention_mask).logits
        torch.testing.assert_close(ours, hf(**ids).logits, atol=1e-4, rtol=1e-4)


def run_cfg(make_run_cfg, folder: Path, data: Path, *extra: str):
    return make_run_cfg([f"init_from={folder}", "task=classification", "data=classification",
                         f"data.path={data}", "logger=csv", "trainer.accelerator=cpu", "batch_size=4",
                         *extra])


def test_reordered_labels_take_the_folders_order(make_run_cfg, folders, tmp_path):
    """(a) folder id2label [positive, negative], data sorted [negative, positive]: the data's 'negative' is
    output 1 as in the folder, not 0 (which would swap every prediction)."""
    folder = head_folder(tmp_path / "clf", folders["bert"], ["positive", "negative"])
    data = labelled(tmp_path / "data", {"negative": 30, "positive": 10})
    plan, tokenizer, datamodule, model = up_to_model(run_cfg(make_run_cfg, folder, data))
    assert not plan.init.new_head and plan.init.labels == ["positive", "negative"]
    assert tokenizer.label_names == datamodule.label_names == ["positive", "negative"]
    assert np.bincount(all_labels(datamodule)).tolist() == [10, 30]  # 30 negatives are label 1
    train = datamodule.datasets["train"]  # rebuilt from the relabelled examples: what the batches hold
    held = np.bincount([int(train[i]["labels"]) for i in range(len(train))], minlength=2)
    assert held[1] > held[0] and held.sum() == len(datamodule.examples["train"][1])
    assert model.config.head.num_labels == 2
    same_logits(model, folder)


def test_labels_the_folder_lacks_are_one_clear_error(make_run_cfg, folders, tmp_path):
    """(b) data [negative, positive], folder [positive, neutral]: same count, so nothing else would notice."""
    folder = head_folder(tmp_path / "clf", folders["bert"], ["positive", "neutral"])
    data = labelled(tmp_path / "data", {"negative": 10, "positive": 10})
    with pytest.raises(ValueError,
                       match=r"the data has labels \['negative'\] that the folder's head does not "
                             r"know; its id2label is \['positive', 'neutral'\].*model.head=classifier"):
        up_to_model(run_cfg(make_run_cfg, folder, data))


def test_model_head_given_trains_a_fresh_head_from_the_data(make_run_cfg, folders, tmp_path):
    """(b)'s way out: model.head=<the folder's head> replaces it; the labels are the data's."""
    folder = head_folder(tmp_path / "clf", folders["bert"], ["positive", "neutral"])
    data = labelled(tmp_path / "data", {"negative": 10, "positive": 10, "neutral": 10})
    plan, tokenizer, _, model = up_to_model(run_cfg(make_run_cfg, folder, data, "model.head=classifier"))
    assert plan.init.fresh_head and plan.init.labels is None
    assert tokenizer.label_names == ["negative", "neutral", "positive"] and model.config.head.num_labels == 3
    from safetensors.torch import load_file

    old = load_file(folder / "model.safetensors")
    assert not any(torch.equal(p, old["bert.pooler.dense.weight"]) for p in model.parameters()
                   if p.shape == old["bert.pooler.dense.weight"].shape)  # the pooler is fresh too


def written_out(folder: Path) -> Path:
    """The folder with its default id2label written in config.json, as transformers 4 saved it (5 leaves it
    out)."""
    config = json.loads((folder / "config.json").read_text())
    config["id2label"], config["label2id"] = {"0": "LABEL_0", "1": "LABEL_1"}, {"LABEL_0": 0, "LABEL_1": 1}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("saved", [lambda f: f, written_out], ids=["id2label_left_out", "id2label_LABEL_i"])
def test_generic_folder_labels_take_the_data_names_in_order(make_run_cfg, folders, tmp_path, saved):
    """(c) LABEL_0, LABEL_1 (transformers' default): the data's sorted names take their places; the run says
    so."""
    folder = saved(head_folder(tmp_path / "clf", folders["bert"], ["LABEL_0", "LABEL_1"]))
    data = labelled(tmp_path / "data", {"negative": 30, "positive": 10})
    plan, tokenizer, datamodule, model = up_to_model(run_cfg(make_run_cfg, folder, data))
    assert tokenizer.label_names == ["negative", "positive"]
    assert np.bincount(all_labels(datamodule)).tolist() == [30, 10]
    assert any("generic" in note for note in plan.init.notes)
    same_logits(model, folder)


def test_generic_folder_labels_of_another_count_are_refused(make_run_cfg, folders, tmp_path):
    folder = head_folder(tmp_path / "clf", folders["bert"], ["LABEL_0", "LABEL_1"])
    data = labelled(tmp_path / "data", {"negative": 10, "positive": 10, "neutral": 10})
    with pytest.raises(ValueError, match=r"2 outputs with generic names .* the data has 3 labels"):
        up_to_model(run_cfg(make_run_cfg, folder, data))


def test_a_subset_of_the_folders_labels_is_indexed_in_its_order(make_run_cfg, folders, tmp_path):
    """(d) data [negative, positive] of folder [positive, neutral, negative]: 3 outputs, negative is 2."""
    folder = head_folder(tmp_path / "clf", folders["bert"], ["positive", "neutral", "negative"])
    data = labelled(tmp_path / "data", {"negative": 30, "positive": 10})
    _, tokenizer, datamodule, model = up_to_model(run_cfg(make_run_cfg, folder, data))
    assert tokenizer.label_names == ["positive", "neutral", "negative"] and model.config.head.num_labels == 3
    assert np.bincount(all_labels(datamodule), minlength=3).tolist() == [10, 0, 30]
    same_logits(model, folder)


def test_token_tags_take_the_folders_order(make_run_cfg, folders, tmp_path):
    """The same for a BertForTokenClassification folder: tags [O, B-X, I-X], data sorted [B-X, I-X, O]; the
    -100 of a word's later sub-tokens stays."""
    folder = head_folder(tmp_path / "ner", folders["bert"], ["O", "B-X", "I-X"], kind="token")
    rows = [{"tokens": ["def", "add", "(a,", "b):"], "tags": ["O", "B-X", "I-X", "O"]}] * 20
    (data := tmp_path / "tags.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                                 encoding="utf-8")
    _, tokenizer, datamodule, model = up_to_model(make_run_cfg([
        f"init_from={folder}", "task=token_classification", "data=token_tags", f"data.path={data}",
        "logger=csv", "trainer.accelerator=cpu", "batch_size=4"]))
    assert tokenizer.label_names == ["O", "B-X", "I-X"]
    labels = all_labels(datamodule)
    words = labels[labels >= 0]
    assert np.bincount(words).tolist() == [40, 20, 20]  # two O words a sentence
    same_logits(model, folder, kind="token")


@pytest.mark.parametrize(("folder", "data", "names", "to_run"), [
    (["b", "a"], ["a", "b"], ["b", "a"], [1, 0]),
    (["c", "b", "a"], ["a", "c"], ["c", "b", "a"], [2, 0]),
    (["LABEL_0", "LABEL_1"], ["x", "y"], ["x", "y"], [0, 1]),
])
def test_order_labels_by_hand(folder, data, names, to_run):
    order = order_labels(folder, data, "init_from=F", "classifier")
    assert order.names == names and order.to_run.tolist() == to_run


def test_generic_names():
    assert generic_names(["LABEL_0", "LABEL_1"]) and not generic_names(["LABEL_1", "LABEL_0"])
