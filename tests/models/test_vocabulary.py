"""The config vocabulary (docs/design.md, "Config parts"): every ModelConfig key has
one declared rule (the spine's, an owner entry's, or a part's typed settings), a config is checked in one pass
per build, and a key of a positional scheme or RoPE scaling that is not chosen cannot arise: choosing another
name replaces the subtree a base held (preset, mapping, saved config), and the key given under an entry that
does not read it is refused, naming the entries that read it."""

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
from zoo.config import MODEL_OPTIONS, PARTS, ModelConfig
from zoo.hydra_schema import part_overrides
from zoo.models import vocabulary
from zoo.modules.positional import POSITIONALS
from zoo.modules.positional_settings import POSITIONAL, ROPE_SCALING
from zoo.presets import config_root
from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from

SMALL = dict(vocab_size=40, d_model=16, n_heads=2, n_layers=1, max_seq_len=16)
# a value other than the default for every key a positional scheme (model.positional) or a RoPE scaling
# (model.positional.scaling) reads, by entry
NOT_DEFAULT = {"rope": {"base": 5e5, "local_base": 1e4, "layout": "interleaved", "fraction": 0.5,
                        "scaling": "linear"},
               "learned": {"offset": 2, "skip_pads": True}, "sinusoidal": {"layout": "half"},
               "t5_relative": {"buckets": 16, "max_distance": 64}}
SCALING_NOT_DEFAULT = {"linear": {"factor": 2.0},
                       "llama3": {"factor": 2.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                                  "original_max_len": 8},
                       "yarn": {"factor": 2.0, "original_max_len": 8, "truncate": False, "mscale": 1.0,
                                "mscale_all_dim": 1.0},
                       "longrope": {"original_max_len": 8, "short_factor": [2.0], "long_factor": [3.0]}}
PART_FIELDS = {*PARTS, "layer_pattern"}  # typed settings: their keys' rules are their entries' declarations


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
    """A key's rule is MODEL_OPTIONS' or its part's, never two, and no field is left to its type hint."""
    assert not set(MODEL_OPTIONS.rules) & PART_FIELDS
    assert set(MODEL_OPTIONS.rules) | PART_FIELDS == {f.name for f in fields(ModelConfig)}
    for table, values in ((POSITIONAL, NOT_DEFAULT), (ROPE_SCALING, SCALING_NOT_DEFAULT)):
        for name, keys in table.docs().items():  # a new scheme or scaling key gets a test value here
            assert set(keys) == set(values.get(name, {})), (table.key, name)
            for key, (_, default) in keys.items():
                assert values[name][key] != default, (table.key, name, key)


def test_zoo_build_checks_once_and_construction_not_at_all(passes):
    cfg = ModelConfig(**SMALL, dropout=1.5)  # constructing and replacing check nothing
    dataclasses.replace(cfg, d_model=-1)
    assert passes == []
    zoo.build("gpt_nano", **SMALL)  # preset -> config -> build_model -> the architecture's __init__
    assert len(passes) == 1
    zoo.build("gpt_nano", **SMALL)  # an equal config passed already
    assert len(passes) == 1


@pytest.mark.parametrize("scheme", POSITIONALS.names())
def test_a_key_of_another_scheme_is_replaced_from_a_base_and_refused_when_given(scheme):
    read = set(POSITIONAL.docs()[scheme])
    others = [(owner, key) for owner, keys in NOT_DEFAULT.items() for key in keys if key not in read]
    assert others  # every scheme misses some other scheme's key
    for owner, key in others:
        value = NOT_DEFAULT[owner][key]
        built = zoo.build({**SMALL, "positional": {"name": owner, key: value}}, positional=scheme)
        assert built.config.positional == POSITIONAL.defaults(scheme), (owner, key)
        refused = (rf"^model.positional={scheme} has no key '{key}'. model.positional.{key} is read by "
                   rf"positional=(\w+\|)*{owner}(\|\w+)*: choose it with model.positional=\w+ ")
        with pytest.raises(ValueError, match=refused):
            zoo.build({**SMALL, "positional": scheme}, positional={key: value})
        with pytest.raises(ValueError, match=refused):
            zoo.build({**SMALL, "positional": {"name": scheme, key: value}})
        with pytest.raises(ValueError, match=refused):
            ModelConfig(**SMALL, positional={"name": scheme, key: value})


def test_a_saved_config_with_a_key_of_another_scheme_still_reads():
    """An old checkpoint's or export's config.json (the flat layout) may hold such a key: it loads without
    it."""
    spine = {k: v for k, v in ModelConfig(**SMALL).to_dict().items() if k not in PART_FIELDS}
    saved = {**spine, "positional": "learned", "rope_layout": "interleaved", "rope_base": 5e5}
    cfg = saved_model_config(saved, "config.json: model_config")
    assert cfg.positional == POSITIONAL.defaults("learned")
    with pytest.raises(ValueError, match=r"not a valid model config: model.dropout must be in"):
        saved_model_config({**saved, "dropout": 2.0}, "config.json: model_config")


def test_a_scaling_reads_its_own_keys_only():
    with pytest.raises(ValueError, match=r"model.positional.scaling=yarn has no key 'low_freq_factor'. "
                                         r"model.positional.scaling.low_freq_factor is read by "
                                         r"positional.scaling=llama3: choose it"):
        zoo.build({**SMALL, "positional": {"name": "rope", "scaling": {"name": "yarn", "factor": 2.0,
                                                                         "original_max_len": 8}}},
                  positional={"scaling": {"low_freq_factor": 2.0}})
    model = zoo.build({**SMALL, "positional": {"name": "rope", "scaling": {
        "name": "llama3", "factor": 2.0, "original_max_len": 8, "low_freq_factor": 2.0}}})
    assert model.config.positional.scaling.low_freq_factor == 2.0


def _resolved(given: list[str]):
    """The ModelConfig train.py resolves from these command-line overrides."""
    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        composed = compose("config", overrides=part_overrides(given)).model
    return plan.resolve_model(OmegaConf.to_container(composed, resolve=True))


def test_command_line_rule():
    """train.py model=llama3_2_1b model.positional=alibi: the preset's RoPE subtree (base, scaling) is
    replaced; a rotary-only layer tag under a scheme that does not rotate, and a RoPE scaling key given on the
    command line under a scaling that does not read it, are errors naming what reads them."""
    cfg = _resolved(["model=llama3_2_1b", "model.positional=alibi"])
    assert cfg.positional == POSITIONAL.defaults("alibi")
    cfg = _resolved(["model=gpt_nano", "model.layer_pattern=[rope,nope]"])
    with pytest.raises(ValueError, match=re.escape(
            "model.layer_pattern=['rope', 'nope'] tags layers 'nope', which needs a rotary scheme "
            "(model.positional=learned does not rotate)")):
        zoo.models.check_config(cfg)
    with pytest.raises(ConfigError, match=re.escape(
            "model.positional.scaling=none has no key 'factor'. model.positional.scaling.factor is read by "
            "positional.scaling=linear|llama3|yarn: choose it")):
        _resolved(["model=llama_small", "+model.positional.scaling.factor=2.0"])


def test_moe_keys_belong_to_the_ffn_part():
    """Issue 25's rough edge, gone with the FFN part: the balancing losses are one mapping (loss ->
    coefficient), so choosing none (`{}`) drops the preset's aux coefficient with it, and a router's key is
    read only under that router; through zoo.build and through train.py's command line."""
    preset = zoo.presets.preset_dict("mixtral_8x7b")
    assert preset["ffn"]["balance"] == {"aux": 0.04}
    small = {**SMALL, "d_ff": 8, "n_kv_heads": 2}
    no_loss = zoo.build({**preset, **small}, ffn={"balance": {}})
    assert (no_loss.config.ffn.balance, no_loss.config.ffn.n_experts) == ({}, 8)
    with pytest.raises(ValueError, match=re.escape("model.ffn.router=topk_softmax has no key 'bias_rate'. "
                                                   "model.ffn.router.bias_rate is read by "
                                                   "ffn.router=sigmoid_bias")):
        zoo.build({**small, "ffn": "moe"}, ffn={"router": {"bias_rate": 0.1}})
    cfg = _resolved(["model=mixtral_8x7b", "model.ffn.balance={}"])
    assert cfg.ffn == zoo.presets.resolve_config("mixtral_8x7b", ffn={"balance": {}}).ffn
    cfg = _resolved(["model=mixtral_8x7b", "model.ffn.balance={z:0.5}"])
    assert cfg.ffn.balance == {"z": 0.5}  # given whole: replaces the preset's, not merged into it
    cfg = _resolved(["model=mixtral_8x7b", "+model.ffn.balance.z=0.5"])
    assert cfg.ffn.balance == {"aux": 0.04, "z": 0.5}  # one loss added
    cfg = _resolved(["model=mixtral_8x7b", "model.ffn.router=sigmoid_bias",
                                  "model.ffn.router.bias_rate=0.1"])
    assert (cfg.ffn.router.name, cfg.ffn.router.bias_rate, cfg.ffn.n_experts) == ("sigmoid_bias", 0.1, 8)
    with pytest.raises(ConfigError, match=re.escape("model.ffn=mlp has no key 'top_k'. model.ffn.top_k is "
                                                    "read by ffn=moe")):
        _resolved(["model=gpt_nano", "+model.ffn.top_k=1"])


def test_a_saved_moe_config_of_the_flat_layout_reads_as_the_ffn_part():
    """Before the FFN was a part: `ffn: moe` and `moe: {...}` with per-loss coefficients; a key of a loss or
    router not chosen was ignored then and is dropped now."""
    saved = {**ModelConfig(**SMALL, d_ff=8).to_dict(), "ffn": "moe",
             "moe": {"n_experts": 4, "balance": "z", "aux_coef": 0.3, "bias_rate": 0.1}}
    ffn = saved_model_config(saved, "config.json: model_config").ffn
    assert ffn.to_data() == {**zoo.modules.ffn_settings.FFN.parse("moe").to_data(), "n_experts": 4,
                             "balance": {"z": 0.001}}
    both = {**saved, "moe": {"router": "sigmoid_bias", "bias_rate": 0.1, "balance": ["aux", "z"],
                             "z_coef": 0.5}}
    ffn = saved_model_config(both, "config.json: model_config").ffn
    assert (ffn.router.name, ffn.router.bias_rate, ffn.balance) == ("sigmoid_bias", 0.1,
                                                                    {"aux": 0.01, "z": 0.5})
