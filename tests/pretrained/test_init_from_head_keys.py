"""init_from and the keys heads read (zoo.modules.head_settings: each head's settings class): a new head
drops every key of the head it replaces (derived from the settings, not a hand list), and a model.head.*
override of a key the chosen head does not read is refused with the same words as zoo.build / train.py
without init_from."""

from __future__ import annotations

import pytest

import zoo
from zoo.finetune import setup
from zoo.finetune.setup import plan_init
from zoo.modules.head_settings import HEAD
from zoo.tasks import TASKS


def test_a_new_head_drops_every_key_of_the_old_head(shipped):
    """Was: only head_transform/head_bias/head_activation (a hand list) were reset, so a BertModel folder
    (head none, pooler tanh) kept the pooler tanh under task=token_classification, whose head never reads
    it."""
    folder = shipped.sentence_transformers()
    plan = plan_init({"init_from": str(folder), "model": {}}, TASKS.get("token_classification").head)
    assert plan.model.head.name == "token_classifier" and plan.new_head
    assert set(HEAD.keys("none")) == {"pool", "pooler"}
    assert not {"pool", "pooler"} & set(HEAD.keys("token_classifier"))
    # BERT's token classifier as the family builds it (a projection bias), nothing of the bare head's
    assert plan.model.head == HEAD.parse({"name": "token_classifier", "proj_bias": True})


def test_an_override_of_a_key_the_head_does_not_read_is_refused(shipped, monkeypatch):
    """Was: accepted (a head key's shape is free with init_from) and ignored."""
    folder = shipped.sentence_transformers()
    with pytest.raises(ValueError) as built:  # the rule without init_from
        zoo.build("bert_small", head={"name": "token_classifier", "num_labels": 2, "pooler": "relu"})
    monkeypatch.setattr(setup, "command_line", lambda: [f"init_from={folder}", "model.head.pooler=relu"])
    resolved = {"init_from": str(folder), "model": {"head": {"pooler": "relu"}}}
    with pytest.raises(ValueError) as planned:
        plan_init(resolved, TASKS.get("token_classification").head)
    assert str(planned.value) == str(built.value) == (
        "model.head=token_classifier has no key 'pooler'. model.head.pooler is read by head=classifier|none: "
        "choose it with model.head=classifier (a new name replaces the whole model.head). Its keys: "
        "num_labels, dense, activation, proj_bias.")
    assert plan_init(resolved, TASKS.get("classification").head).model.head.pooler == "relu"  # read: applies
