"""Knobs belong to the head that reads them (issue 28 item 7; since issue 35 each head's keys are its
settings under `model.head`): choosing another head replaces the subtree, so a preset's masked-LM knobs do not
follow into a classifier, and a key of another head is refused naming the heads that read it. Checkpoints of
the flat layout (head keys beside the head's name, the unread ones included) still load and resume."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import zoo
import zoo.training.plan as plan
from zoo.checkpoint import Checkpoint, atomic_torch_save, check_compatible, zoo_section
from zoo.config import ModelConfig
from zoo.config_moved import upgrade_saved
from zoo.data import TOKENIZERS
from zoo.hydra_schema import part_overrides
from zoo.modules.head_settings import HEAD, ClassifierSettings, LMHeadSettings
from zoo.modules.heads import HEADS
from zoo.presets import config_root
from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from
SMALL = dict(vocab_size=60, d_model=16, n_heads=2, n_layers=1, max_seq_len=16)


def test_every_head_has_its_settings_and_every_settings_class_a_head():
    assert HEAD.names() == HEADS.names()


def test_choosing_another_head_leaves_the_presets_head_keys_behind():
    """Was (flat): bert_small's head_transform / head_bias had to be reset under head=classifier."""
    model = zoo.build("bert_small", head={"name": "classifier", "num_labels": 2}, **SMALL)
    assert model.config.head == ClassifierSettings(num_labels=2)
    assert zoo.build("bert_small", **SMALL).config.head == LMHeadSettings(transform=True, bias=True)
    gemma = zoo.build("gemma2_2b", head={"name": "classifier", "num_labels": 2}, **SMALL, n_kv_heads=1,
                      head_dim=None).config.head
    assert not hasattr(gemma, "softcap")


def test_a_key_of_another_head_is_refused_naming_its_readers():
    with pytest.raises(ValueError, match=r"model.head=classifier has no key 'transform'. "
                                         r"model.head.transform is read by head=lm"):
        zoo.build("bert_small", head={"name": "classifier", "num_labels": 2, "transform": True}, **SMALL)
    with pytest.raises(ValueError, match=r"model.head=lm has no key 'num_labels'.*head=classifier\|"
                                         r"token_classifier"):
        zoo.build("gpt_nano", head={"num_labels": 2})  # flat, it was accepted and ignored before issue 28
    with pytest.raises(ValueError, match=r"model.num_labels is now model.head.num_labels"):
        zoo.build("gpt_nano", num_labels=2)


def _composed_model(overrides: list[str]) -> dict:
    """conf/config.yaml's model as train.py composes it (a part's name or mapping replaces that part)."""
    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=part_overrides(overrides)).model,
                                      resolve=True)


def test_command_line_rule():
    """train.py model=bert_small model.head={name:classifier,num_labels:2}: the preset's MLM knobs are gone;
    one of them given with the classifier is an error naming it."""
    given = ["model=bert_small", "model.head={name:classifier,num_labels:2}"]
    cfg = plan.resolve_model(_composed_model(given))
    assert cfg.head == ClassifierSettings(num_labels=2)
    given = ["model=bert_small", "model.head={name:classifier,bias:true}"]
    with pytest.raises(Exception, match=r"model.head=classifier has no key 'bias'"):
        plan.resolve_model(_composed_model(given))


def test_classifier_checkpoint_of_the_flat_layout_loads_and_resumes(tmp_path):
    """A checkpoint of `model=bert_small model.head=classifier` written before the parts: its flat config
    holds the MLM knobs (unread) and lacks head_pool / head_pooler / head_proj_bias. It loads with the same
    logits (first token, tanh pooler, biased projection: the classifier it was) and resumes."""
    tok = TOKENIZERS["char"](["the cat sat", "a dog ran"])
    now = ModelConfig(arch="encoder", head={"name": "classifier", "num_labels": 3}, vocab_size=tok.vocab_size,
                      d_model=16, n_heads=2, n_layers=1, max_seq_len=16, norm_placement="post")
    model = zoo.build(now).eval()
    section = zoo_section(now, "classification", tok)
    flat = {k: v for k, v in section["model_config"].items() if k not in ("head", "mixer", "positional",
                                                                           "layer_pattern")}
    section["model_config"] = {**flat, "head": "classifier", "num_labels": 3, "head_transform": True,
                               "head_bias": True, "positional": "learned", "pos_offset": 0}
    path = tmp_path / "old.ckpt"
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": section}, path)
    loaded, _ = zoo.load(path)
    ids = torch.tensor([[1, 4, 5, 6]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    check_compatible(Checkpoint.read(path).record, now, "classification", path, tok)
    assert ModelConfig.from_dict(upgrade_saved(section["model_config"])) == now
