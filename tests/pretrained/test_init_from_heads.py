"""`init_from=<folder>` of a folder whose head the task does not use, through the functions train.py runs
(zoo.finetune.setup: plan_init -> read_init -> build_model): the task gets its fresh head, the log names the
new tensors, and a head tensor is reused only where transformers would reuse it (the same checkpoint
tensor)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import zoo
from tests.pretrained.classify_run import train_classifier_from
from zoo.config import ModelConfig
from zoo.finetune.init_from import HuggingFaceFolder, build_initialised
from zoo.finetune.setup import build_model, plan_init, read_init
from zoo.tasks import TASKS


def fresh_head(folder, head: str, num_labels: int) -> tuple[torch.nn.Module, list[str]]:
    """The folder's weights in a model of `head` (build_initialised, as build_model calls it)."""
    source = HuggingFaceFolder(folder)
    state = source.state()
    head_part = {"name": head, "num_labels": num_labels}  # the head's defaults (pooler: the head's own)
    config = ModelConfig.from_dict({**source.config().to_dict(), "head": head_part})
    return build_initialised(config, state, str(folder), source.model_type)


def test_bare_bert_folder_with_task_classification_gets_a_fresh_projection(shipped, tmp_path, capsys):
    """The MiniLM failure: a sentence-transformers BertModel folder (pooler, no masked-LM head) and
    task=classification failed with 'missing 5 tensor(s) ... cls.predictions...'."""
    folder = shipped.sentence_transformers()
    plan = plan_init({"init_from": str(folder), "model": {}}, TASKS.get("classification").head)
    # BERT's classifier pools so
    assert (plan.model.head.name, plan.model.head.pooler) == ("classifier", "tanh")
    init = read_init(plan, tmp_path)
    config = plan.model.with_head(num_labels=2)  # what the data gives
    model, applied = build_model(plan, init.state, config, {"name": "full"})
    assert applied.description.endswith("; new (trained from scratch): head.proj.bias, head.proj.weight")
    bare = zoo.from_pretrained(folder)
    # BertModel's pooler, as transformers reuses it
    assert torch.equal(model.head.pool.weight, bare.head.pool.weight)
    ids = torch.tensor([[2, 9, 10, 11, 3]])
    with torch.no_grad():
        assert torch.equal(model.eval()(ids).hidden_states, bare(ids).last_hidden_state)


def test_a_new_head_is_built_as_the_family_builds_it_and_exports(shipped, tmp_path):
    """DistilBERT's bare model has no pooler and its QA class none either, but its classifier pools with
    `pre_classifier` + ReLU: task=classification gets that head (fresh), so the run exports as
    DistilBertForSequenceClassification."""
    for suffix in ("Model", "ForQuestionAnswering"):
        folder = tmp_path / suffix
        shutil.copytree(shipped.folder("distilbert", suffix), folder)
        for name in ("tokenizer.json", "tokenizer_config.json"):  # a tokenizer that fits its 99 rows
            shutil.copy(shipped.sentence_transformers() / name, folder / name)
        plan = plan_init({"init_from": str(folder), "model": {}}, TASKS.get("classification").head)
        assert ((plan.model.head.name, plan.model.head.pooler, plan.model.head.proj_bias)
                == ("classifier", "relu", True))
        config = plan.model.with_head(num_labels=2)
        model, applied = build_model(plan, read_init(plan, tmp_path).state, config, {"name": "full"})
        assert applied.description.endswith("new (trained from scratch): head.pool.bias, head.pool.weight, "
                                            "head.proj.bias, head.proj.weight")
        out = zoo.save_pretrained(model.eval(), tmp_path / f"{suffix}-export", label_names=["no", "yes"])
        hf = transformers.DistilBertForSequenceClassification.from_pretrained(out).eval()
        ids = torch.tensor([[2, 9, 10, 11, 3]])
        with torch.no_grad():
            assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4


def test_roberta_pooler_is_not_the_classifier_dense(shipped):
    """RobertaForSequenceClassification's dense is `classifier.dense`, not RobertaModel's `pooler.dense`."""
    model, fresh = fresh_head(shipped.folder("roberta", "Model"), "classifier", 2)
    assert fresh == ["head.pool.bias", "head.pool.weight", "head.proj.bias", "head.proj.weight"]
    assert model.head.pooler == "tanh"


def test_qa_projection_is_not_reused_by_a_two_label_classifier(shipped):
    """Same shape (2, d), another tensor: `qa_outputs` is no `classifier`."""
    _, fresh = fresh_head(shipped.folder("bert", "ForQuestionAnswering"), "classifier", 2)
    assert fresh == ["head.pool.bias", "head.pool.weight", "head.proj.bias", "head.proj.weight"]


def test_token_classifier_reuses_the_classifier_of_the_same_name_and_shape(shipped):
    """BertForTokenClassification reads `classifier` as BertForSequenceClassification does (transformers
    reuses it too); the pooler it has no use for is dropped."""
    folder = shipped.folder("bert", "ForSequenceClassification")
    model, fresh = fresh_head(folder, "token_classifier", 3)
    assert fresh == []
    assert torch.equal(model.head.proj.weight, load_file(folder / "model.safetensors")["classifier.weight"])


def test_a_head_missing_from_the_file_is_made_fresh_not_an_error(shipped, tmp_path):
    """A base model saved under a head class: from_pretrained says what is missing; init_from makes it new."""
    folder = tmp_path / "no-head"
    shutil.copytree(shipped.folder("bert", "ForSequenceClassification"), folder)
    tensors = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if not k.startswith("classifier.")},
              folder / "model.safetensors", metadata={"format": "pt"})
    try:
        zoo.from_pretrained(folder)
        raise AssertionError("a head missing from the file must fail from_pretrained")
    except ValueError as err:
        assert "missing 2 tensor(s) the model needs: classifier.weight, classifier.bias" in str(err)
    model, fresh = fresh_head(folder, "classifier", 3)
    assert fresh == ["head.proj.bias", "head.proj.weight"]
    assert torch.equal(model.head.pool.weight, tensors["bert.pooler.dense.weight"])
    assert (json.loads((folder / "config.json").read_text())["architectures"]
            == ["BertForSequenceClassification"])


@pytest.mark.e2e
def test_train_classification_from_a_sentence_transformers_folder_and_export_it(shipped, tmp_path, capsys):
    """The whole path of `python train.py init_from=<MiniLM-like folder> task=classification`: it trains,
    names the new tensors, and exports as BertForSequenceClassification with the data's label names."""
    folder = shipped.sentence_transformers()
    result = train_classifier_from(folder, tmp_path)
    assert "new (trained from scratch): head.proj.bias, head.proj.weight" in capsys.readouterr().out
    assert result.metrics["val/accuracy"] >= 0.9

    out = zoo.export(result.last_checkpoint, tmp_path / "hf", format="hf")
    hf = transformers.BertForSequenceClassification.from_pretrained(out).eval()
    assert hf.config.id2label == {0: "animal", 1: "thing"}
    model, _ = zoo.load(result.last_checkpoint)
    ids = transformers.AutoTokenizer.from_pretrained(out)(["the red cat sat on the mat"], return_tensors="pt")
    with torch.no_grad():
        ref = hf(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"]).logits
        got = model(ids["input_ids"], attention_mask=ids["attention_mask"]).logits
    assert (got - ref).abs().max() < 1e-4
