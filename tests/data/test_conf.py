"""The Hydra config groups conf/data and conf/tokenizer match what the registries accept."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from zoo.data.sources import SOURCES
from zoo.data.sources.base import LOADER_KEYS, source_keys
from zoo.tokenizers import TOKENIZERS, tokenizer_options, validate_tokenizer_cfg

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
    assert cfg["name"] == name and set(cfg) == set(tokenizer_options(name).rules)
    # file / hf need a real path, tested in test_tokenizer / test_hf_tokenizer
    if not tokenizer_options(name).required:
        validate_tokenizer_cfg(cfg)


def test_groups_compose_with_hydra_overrides(tmp_path):
    from hydra import compose, initialize_config_dir

    from zoo.tasks import build_data

    (tmp_path / "a.txt").write_text("hydra composes the text group\n" * 30)
    overrides = ["+data=text", f"data.files={tmp_path}/*.txt", "+tokenizer=char"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=None, overrides=overrides)
    assert cfg.data.name == "text" and cfg.tokenizer.name == "char"
    tok, dm = build_data(
        cfg.data, cfg.tokenizer, task="mlm", max_seq_len=8, batch_size=2, cache_dir=tmp_path / "c"
    )
    assert next(iter(dm.train_dataloader()))["input_ids"].shape == (2, 8)
