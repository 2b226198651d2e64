"""Callback defaults are written once, in each callback's declaration (`@callback(name, options)` in
zoo/training/callbacks.py): conf/callbacks YAML composes them from the registry and holds no value of its own
(null switches one off), train.py's composed config equals them, and a library user who builds callbacks
without Hydra gets the same options and the same callback objects."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from zoo.inspection.callback import AttentionMapLogger
from zoo.options import Options
from zoo.presets import config_root
from zoo.training.callbacks import (
    CALLBACKS,
    CallbackContext,
    LineProgress,
    SampleGeneration,
    TokensPerSecond,
    ValExactMatch,
    ZooCheckpoint,
    build_callbacks,
    callback_settings,
)
from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from

DECLARED = {name: dict(CALLBACKS.get(name).options.defaults) for name in CALLBACKS}


def _composed(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=list(overrides)).callbacks, resolve=True)


def test_every_declared_key_has_a_default():
    """A key without a default would be missing from the composed config (Hydra could not override it)."""
    for name in CALLBACKS:
        options = CALLBACKS.get(name).options
        assert set(options.defaults) == set(options.rules), name


@pytest.mark.parametrize("path", sorted((config_root() / "callbacks").glob("*.yaml")), ids=lambda p: p.name)
def test_callback_yaml_holds_no_default_of_its_own(path: Path):
    """Every value a conf/callbacks file sets is null (switched off) or equals the declared default."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for name, options in data.items():
        if name == "defaults" or options is None:
            continue
        assert name in CALLBACKS, name
        for key, value in options.items():
            assert key == "enabled" or value == DECLARED[name][key], f"{path.name}: {name}.{key}={value!r}"


def test_train_py_composes_the_declared_defaults():
    composed = _composed()
    assert composed.pop("attention_maps") is None  # opt-in
    assert composed == {name: d for name, d in DECLARED.items() if name != "attention_maps"}
    assert _composed("callbacks=with_attention_maps")["attention_maps"] == DECLARED["attention_maps"]
    changed = _composed("callbacks=with_attention_maps", "callbacks.attention_maps.max_tokens=3",
                        "callbacks.checkpoint.mode=max")
    assert (changed["attention_maps"]["max_tokens"], changed["checkpoint"]["mode"]) == (3, "max")


def test_a_library_user_gets_the_same_options_and_callbacks(tmp_path):
    """build_callbacks({name: {}}) without Hydra equals train.py's default callbacks, option by option."""
    composed = _composed()
    bare = {name: {} for name, options in composed.items() if options is not None}
    assert callback_settings(bare) == callback_settings(composed)
    assert callback_settings({"samples": {"seed": 3}})["samples"] == {**DECLARED["samples"], "seed": 3}
    ctx = CallbackContext("seq2seq", tmp_path, tokenizer=None, datamodule=None)

    def described(callbacks: list) -> list[tuple]:
        out = []
        for cb in callbacks:
            if isinstance(cb, ZooCheckpoint):
                out.append(("checkpoint", cb.monitor, cb.mode, cb.save_top_k, cb.save_last))
            elif isinstance(cb, LineProgress):
                out.append(("lines", cb.every_n_steps))
            elif isinstance(cb, TokensPerSecond):
                out.append(("tokens_per_s", cb.window))
            elif isinstance(cb, ValExactMatch):
                out.append(("exact_match", cb.max_examples))
            elif isinstance(cb, SampleGeneration):
                out.append(("samples", cb.options))
            else:  # the test split's evaluation keeps its options; the non-finite stop has none
                out.append((type(cb).__name__, getattr(cb, "options", None)))
        return out

    from_library = described(build_callbacks(bare, ctx))
    assert from_library == described(build_callbacks(composed, ctx))
    assert ("checkpoint", "val/loss", "min", 1, True) in from_library  # not pytest's tty: progress lines
    assert ("lines", 50) in from_library and ("tokens_per_s", 10) in from_library


def test_constructor_defaults_agree_with_the_declarations():
    """Callbacks usable on their own keep keyword defaults; they are the declared ones. tokens_per_s and
    exact_match are declared from their constructors' signatures, so comparing the two could not fail:
    theirs are checked against the values written here instead."""
    assert Options.of(AttentionMapLogger.__init__).defaults == DECLARED["attention_maps"]
    assert DECLARED["tokens_per_s"] == {"window": 10} == {"window": TokensPerSecond().window}
    lines = Options.of(LineProgress.__init__).defaults
    assert lines["every_n_steps"] == DECLARED["progress_bar"]["every_n_steps"]
    assert DECLARED["exact_match"] == {"max_examples": 200}
    assert Options.of(ValExactMatch.__init__, skip=("task", "tokenizer", "datamodule")).defaults == {
        "max_examples": 200}


@pytest.mark.parametrize("options, named", [({"mode": "maxx"}, "callbacks.checkpoint.mode"),
                                            ({"modee": "max"}, "callbacks.checkpoint.modee"),
                                            ({"enabled": "no"}, "callbacks.checkpoint.enabled")])
def test_a_library_user_gets_the_declared_checks(tmp_path, options, named):
    """Without Hydra (no check_config first), a bad option is zoo's one ValueError naming the key, not
    Lightning's MisconfigurationException or a TypeError from ModelCheckpoint's constructor."""
    ctx = CallbackContext("lm", tmp_path, tokenizer=None, datamodule=None)
    with pytest.raises(ValueError, match=named):
        build_callbacks({"checkpoint": options}, ctx)
