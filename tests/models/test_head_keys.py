"""Knobs belong to the head that reads them (issue 28 item 7). The rule: a key that only another head reads
holds its default; from a preset (or a saved / pretrained config) it is reset, given explicitly (keyword
override, `model.x=` on the command line) with another value it is an error naming it. Checkpoints written
before the rule still load and resume."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import zoo
import zoo.training.plan as plan
from zoo.apps import ConfigError
from zoo.checkpoint import Checkpoint, atomic_torch_save, check_compatible, zoo_section
from zoo.config import ModelConfig
from zoo.data import TOKENIZERS
from zoo.models.head_keys import foreign_keys, head_owned_keys, settle_head_keys, without_foreign_keys
from zoo.modules.heads import HEADS
from zoo.presets import config_root
from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from

# a value other than the default for every head-owned key (a new key must be added here)
NOT_DEFAULT = {"head_transform": True, "head_bias": True, "head_activation": "relu", "head_scale": 0.5,
               "final_softcap": 30.0, "tie_embeddings": False, "num_labels": 2, "head_pool": "last",
               "head_pooler": "tanh", "head_proj_bias": False, "head_dense": True}
MLM_KNOBS = {"head_transform": False, "head_bias": False, "head_activation": None}  # their defaults
SMALL = dict(vocab_size=60, d_model=16, n_heads=2, n_layers=1, max_seq_len=16)


def test_every_head_key_is_a_config_field_with_a_test_value():
    assert head_owned_keys() <= {f.name for f in fields(ModelConfig)}
    assert set(NOT_DEFAULT) == head_owned_keys()


@pytest.mark.parametrize("head", HEADS.names())
def test_foreign_keys_are_reset_from_a_base_and_refused_when_given(head):
    for key in sorted(foreign_keys(head)):
        merged, reset = settle_head_keys({"head": head, key: NOT_DEFAULT[key]}, {})
        assert reset == [key] and merged[key] == getattr(ModelConfig(), key)
        with pytest.raises(ValueError,
                           match=rf"model.{key}=.* is read by model.head=.*, not by model.head={head}"):
            settle_head_keys({"head": head}, {key: NOT_DEFAULT[key]})
    for key in HEADS.get(head).reads:  # its own keys are kept
        merged, reset = settle_head_keys({"head": head, key: NOT_DEFAULT[key]}, {})
        assert merged[key] == NOT_DEFAULT[key] and not reset


def test_preset_mlm_knobs_are_reset_under_a_classifier():
    """Was: bert_small's head_transform / head_bias stayed set under head=classifier, where nothing reads them
    (and no Hugging Face family could express them on export)."""
    model = zoo.build("bert_small", head="classifier", num_labels=2, **SMALL)
    assert {k: getattr(model.config, k) for k in MLM_KNOBS} == MLM_KNOBS
    assert zoo.build("gemma2_2b", head="classifier", num_labels=2, **SMALL, n_kv_heads=1,
                     head_dim=None).config.final_softcap is None


def test_an_explicit_key_of_another_head_is_an_error_and_its_default_is_not():
    with pytest.raises(ValueError, match=r"model.head_transform=True is read by model.head=lm, not by "
                                         r"model.head=classifier; drop it"):
        zoo.build("bert_small", head="classifier", num_labels=2, head_transform=True, **SMALL)
    with pytest.raises(ValueError,
                       match=r"model.num_labels=2 is read by model.head=classifier\|token_classifier"):
        zoo.build("gpt_nano", num_labels=2)  # was: accepted and ignored
    assert not zoo.build("bert_small", head="classifier", num_labels=2, head_transform=False,
                         **SMALL).config.head_bias


def _composed_model(overrides: list[str]) -> dict:
    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=overrides).model, resolve=True)


def test_command_line_rule(monkeypatch):
    """train.py model=bert_small model.head=classifier: the preset's MLM knobs are reset; model.head_bias=true
    given on the command line as well is an error naming it."""
    given = ["model=bert_small", "model.head=classifier", "model.num_labels=2"]
    monkeypatch.setattr(plan, "command_line", lambda: given)
    cfg = plan.resolve_model(_composed_model(given))
    assert cfg.head == "classifier" and {k: getattr(cfg, k) for k in MLM_KNOBS} == MLM_KNOBS
    given = [*given, "model.head_bias=true"]
    with pytest.raises(ConfigError, match=r"model.head_bias=True is read by model.head=lm, not by "
                                               r"model.head=classifier"):
        plan.resolve_model(_composed_model(given))


def test_classifier_checkpoint_from_before_the_rule_loads_and_resumes(tmp_path):
    """A checkpoint of `model=bert_small model.head=classifier` written before: its config holds the MLM
    knobs and lacks head_pool / head_pooler / head_proj_bias. It loads with the same logits (first token, tanh
    pooler, biased projection: the classifier it was) and resumes under today's resolution of that command."""
    tok = TOKENIZERS["char"](["the cat sat", "a dog ran"])
    now = ModelConfig(arch="encoder", head="classifier", num_labels=3, vocab_size=tok.vocab_size, d_model=16,
                      n_heads=2, n_layers=1, max_seq_len=16, norm_placement="post")
    model = zoo.build(now).eval()
    section = zoo_section(now, "classification", tok)
    section["model_config"].update(head_transform=True, head_bias=True)  # the preset's, as saved then
    for key in ("head_pool", "head_pooler", "head_proj_bias"):
        del section["model_config"][key]
    path = tmp_path / "old.ckpt"
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": section}, path)
    loaded, _ = zoo.load(path)
    ids = torch.tensor([[1, 4, 5, 6]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    record = Checkpoint.read(path).record
    check_compatible(record, now, "classification", path, tok)  # was: head_transform differs
    assert without_foreign_keys(ModelConfig.from_dict(section["model_config"])) == now
