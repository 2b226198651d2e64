"""The Hydra config groups conf/data and conf/tokenizer match what the registries accept."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from zoo.data.sources import SOURCES
from zoo.data.sources.base import LOADER_KEYS, source_keys
from zoo.data.tokenizer import TOKENIZER_KEYS, TOKENIZERS, validate_tokenizer_cfg

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_every_source_and_tokenizer_has_a_yaml():
    assert {p.stem for p in (CONF / "data").glob("*.yaml")} == set(SOURCES)
    assert {p.stem for p in (CONF / "tokenizer").glob("*.yaml")} == set(TOKENIZERS)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_data_yaml_keys_are_accepted(name):
    cfg = OmegaConf.load(CONF / "data" / f"{name}.yaml")
    assert cfg.name == name
    assert set(cfg) <= source_keys(name) | LOADER_KEYS
    assert source_keys(name) <= set(cfg)  # every knob is visible in the YAML


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_tokenizer_yaml_keys_are_accepted(name):
    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "tokenizer" / f"{name}.yaml"))
    assert cfg["name"] == name and set(cfg) - {"name"} == TOKENIZER_KEYS[name]
    if name != "file":
        validate_tokenizer_cfg(cfg)
