"""init_from and the keys heads read (zoo.modules.heads: each head declares them): a new head drops every key
of the head it replaces (derived from the registry, not a hand list), and a model.* override of a key the
chosen head does not read is refused with the same words as zoo.build / train.py without init_from."""

from __future__ import annotations

import pytest

import zoo
from zoo.finetune import setup
from zoo.finetune.setup import plan_init
from zoo.modules.heads import HEADS
from zoo.tasks import TASKS


def test_a_new_head_drops_every_key_of_the_old_head(shipped):
    """Was: only head_transform/head_bias/head_activation (a hand list) were reset, so a BertModel folder
    (head none, pooler tanh) kept head_pooler=tanh under task=token_classification, whose head never reads
    it."""
    folder = shipped.sentence_transformers()
    plan = plan_init({"init_from": str(folder), "model": {}}, TASKS.get("token_classification").head)
    assert plan.model.head == "token_classifier" and plan.new_head
    assert set(HEADS.get("none").reads) == {"head_pool", "head_pooler"}
    assert (plan.model.head_pool, plan.model.head_pooler) == (None, None)


def test_an_override_of_a_key_the_head_does_not_read_is_refused(shipped, monkeypatch):
    """Was: accepted (a head key's shape is free with init_from) and ignored."""
    folder = shipped.sentence_transformers()
    with pytest.raises(ValueError) as built:  # the rule without init_from
        zoo.build("bert_small", head="token_classifier", num_labels=2, head_pooler="relu")
    monkeypatch.setattr(setup, "command_line", lambda: [f"init_from={folder}", "model.head_pooler=relu"])
    resolved = {"init_from": str(folder), "model": {"head_pooler": "relu"}}
    with pytest.raises(ValueError) as planned:
        plan_init(resolved, TASKS.get("token_classification").head)
    assert str(planned.value) == str(built.value) == (
        "model.head_pooler='relu' is read by model.head=classifier|none, not by model.head=token_classifier; "
        "drop it (model.head=token_classifier reads: head_activation, head_dense, head_proj_bias, "
        "num_labels)")
    assert plan_init(resolved, TASKS.get("classification").head).model.head_pooler == "relu"  # read: applies
