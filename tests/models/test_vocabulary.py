"""The config vocabulary (docs/design.md, "Config vocabulary"): every ModelConfig key has one declared rule,
a config is checked in one pass per build, and a key of an entry that is not chosen is reset when it comes
from a base (preset, mapping, saved config), refused when given explicitly, and refused by the build check."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import fields

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import zoo
import zoo.training.plan as plan
from zoo.apps import ConfigError
from zoo.checkpoint import saved_model_config
from zoo.config import MODEL_OPTIONS, ModelConfig
from zoo.models import vocabulary
from zoo.modules.positional import POSITIONALS
from zoo.presets import config_root
from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from

SMALL = dict(vocab_size=40, d_model=16, n_heads=2, n_layers=1, max_seq_len=16)
# a value other than the default for every key a positional scheme or a RoPE scaling reads
NOT_DEFAULT = {"rope_base": 5e5, "rope_local_base": 1e4, "rope_layout": "interleaved", "rope_fraction": 0.5,
               "nope_every": 2, "rope_scaling": "linear", "rope_factor": 2.0, "rope_low_freq_factor": 2.0,
               "rope_high_freq_factor": 8.0, "rope_original_max_len": 8, "rope_short_factor": [2.0],
               "rope_long_factor": [3.0], "rope_truncate": False, "pos_offset": 2,
               "pos_skip_pads": True, "sinusoidal_layout": "half", "rel_buckets": 16, "rel_max_distance": 64}
SCHEME_GROUPS = ("positional", "rope_scaling")


@pytest.fixture
def passes(monkeypatch):
    """The validation passes from now on (the memo of checked configs emptied first)."""
    counted: list[str] = []
    validate = vocabulary.validate

    def counting(cfg):
        counted.append(repr(cfg))
        return validate(cfg)

    monkeypatch.setattr(vocabulary, "_CHECKED", {})
    monkeypatch.setattr(vocabulary, "validate", counting)
    return counted


def test_every_key_has_one_declared_rule():
    """A key's rule is MODEL_OPTIONS' or its entries', never both, and no field is left to its type hint."""
    owned = vocabulary.vocabulary().owners()
    assert not set(owned) & set(MODEL_OPTIONS.rules)
    assert set(owned) | set(MODEL_OPTIONS.rules) == {f.name for f in fields(ModelConfig)}
    scheme_keys = {key for key, (group, _) in owned.items() if group in SCHEME_GROUPS}
    assert scheme_keys == set(NOT_DEFAULT)  # a new scheme key gets a test value here


def test_zoo_build_checks_once_and_construction_not_at_all(passes):
    cfg = ModelConfig(**SMALL, dropout=1.5)  # constructing and replacing check nothing
    dataclasses.replace(cfg, d_model=-1)
    assert passes == []
    zoo.build("gpt_nano", **SMALL)  # preset -> config -> build_model -> the architecture's __init__
    assert len(passes) == 1
    zoo.build("gpt_nano", **SMALL)  # an equal config passed already
    assert len(passes) == 1


@pytest.mark.parametrize("scheme", POSITIONALS.names())
def test_a_key_of_another_scheme_is_reset_from_a_base_and_refused_when_given(scheme):
    read = vocabulary.vocabulary().read_keys({**SMALL, "positional": scheme})
    for key in sorted(set(NOT_DEFAULT) - read):
        default = getattr(ModelConfig(), key)
        built = zoo.build({**SMALL, "positional": scheme, key: NOT_DEFAULT[key]})
        assert getattr(built.config, key) == default, key
        with pytest.raises(ValueError, match=rf"^model.{key}=.* is read by model.(positional|rope_scaling)="
                                             r".*, not by model.(positional|rope_scaling)=.*; drop it"):
            zoo.build({**SMALL, "positional": scheme}, **{key: NOT_DEFAULT[key]})
        with pytest.raises(ValueError, match=rf"^model.{key}=.* has no effect with model.\w+="):
            zoo.models.check_config(ModelConfig(**SMALL, positional=scheme, **{key: NOT_DEFAULT[key]}))


def test_a_saved_config_with_a_key_of_another_scheme_still_reads():
    """An old checkpoint's or export's config.json may hold such a key: it loads, reset to its default."""
    saved = {**ModelConfig(**SMALL).to_dict(), "positional": "learned", "rope_layout": "interleaved",
             "rope_base": 5e5}
    cfg = saved_model_config(saved, "config.json: model_config")
    assert (cfg.rope_layout, cfg.rope_base) == ("half", 10000.0)
    with pytest.raises(ValueError, match=r"not a valid model config: model.dropout must be in"):
        saved_model_config({**saved, "dropout": 2.0}, "config.json: model_config")


def test_a_scaling_reads_its_own_keys_only():
    with pytest.raises(ValueError, match=r"model.rope_low_freq_factor=2.0 is read by "
                                         r"model.rope_scaling=llama3, not by model.rope_scaling=yarn"):
        zoo.build({**SMALL, "positional": "rope", "rope_scaling": "yarn", "rope_factor": 2.0,
                   "rope_original_max_len": 8}, rope_low_freq_factor=2.0)
    model = zoo.build({**SMALL, "positional": "rope", "rope_scaling": "llama3", "rope_factor": 2.0,
                       "rope_original_max_len": 8, "rope_low_freq_factor": 2.0})
    assert model.config.rope_low_freq_factor == 2.0


def _resolved(monkeypatch, given: list[str]):
    """The ModelConfig train.py resolves from these command-line overrides."""
    monkeypatch.setattr(plan, "command_line", lambda: given)
    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        composed = compose("config", overrides=given).model
    return plan.resolve_model(OmegaConf.to_container(composed, resolve=True))


def test_command_line_rule(monkeypatch):
    """train.py model=llama3_2_1b model.positional=alibi: the preset's RoPE keys are reset; a RoPE key given
    on the command line under a scheme or scaling that does not read it is an error naming it."""
    cfg = _resolved(monkeypatch, ["model=llama3_2_1b", "model.positional=alibi"])
    assert (cfg.positional, cfg.rope_base, cfg.rope_scaling) == ("alibi", 10000.0, "none")
    with pytest.raises(ConfigError, match=re.escape(
            "model.nope_every=2 is read by model.positional=rope, not by model.positional=learned")):
        _resolved(monkeypatch, ["model=gpt_nano", "model.nope_every=2"])
    with pytest.raises(ConfigError, match=re.escape(
            "model.rope_factor=2.0 is read by model.rope_scaling=linear|llama3|yarn") + ", not by"):
        _resolved(monkeypatch, ["model=gpt_nano", "model.positional=rope", "model.rope_factor=2.0"])


def test_moe_keys_are_settled_one_by_one(monkeypatch):
    """Issue 25's rough edge: a preset's model.moe.aux_coef is reset when balance=none is chosen over it (the
    mapping is settled key by key, not as one key), and an aux_coef given with balance=none is an error
    naming it; through zoo.build and through train.py's command line."""
    preset = zoo.presets.preset_dict("mixtral_8x7b")
    assert preset["moe"]["aux_coef"] == 0.04
    small = {**SMALL, "d_ff": 8, "n_kv_heads": 2}
    no_loss = zoo.build({**preset, **small, "moe": {**preset["moe"], "balance": "none"}})
    assert no_loss.config.moe == {"n_experts": 8, "top_k": 2, "router": "topk_softmax", "balance": "none"}
    assert zoo.presets.resolve_config("mixtral_8x7b", **{"moe.balance": "none"}).moe == no_loss.config.moe
    refused = re.escape("model.moe.aux_coef=0.01 is read by model.moe.balance=aux, not by "
                        "model.moe.balance=none; drop it")
    with pytest.raises(ValueError, match=refused):
        zoo.build("mixtral_8x7b", moe={"balance": "none", "aux_coef": 0.01})
    with pytest.raises(ValueError, match=r"model.moe.bias_rate=0.1 is read by model.moe.router=sigmoid_bias"):
        zoo.build({**small, "ffn": "moe"}, moe={"bias_rate": 0.1})
    cfg = _resolved(monkeypatch, ["model=mixtral_8x7b", "model.moe.balance=none"])
    assert cfg.moe == no_loss.config.moe
    cfg = _resolved(monkeypatch, ["model=mixtral_8x7b", "model.moe.balance=[z]", "+model.moe.z_coef=0.5"])
    assert (cfg.moe["balance"], cfg.moe["z_coef"], "aux_coef" in cfg.moe) == (["z"], 0.5, False)
    with pytest.raises(ConfigError, match=refused):
        _resolved(monkeypatch, ["model=mixtral_8x7b", "model.moe.balance=none", "model.moe.aux_coef=0.01"])
    with pytest.raises(ConfigError, match=r"model.moe=.* is read by model.ffn=moe, not by model.ffn=mlp"):
        _resolved(monkeypatch, ["model=gpt_nano", "+model.moe.top_k=1"])


def test_a_saved_moe_config_with_a_key_of_another_balance_still_reads():
    saved = {**ModelConfig(**SMALL, d_ff=8, ffn="moe").to_dict(), "moe": {"n_experts": 4, "balance": "z",
                                                                        "aux_coef": 0.3, "bias_rate": 0.1}}
    assert saved_model_config(saved, "config.json: model_config").moe == {"n_experts": 4, "balance": "z"}
