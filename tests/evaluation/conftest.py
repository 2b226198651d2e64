"""Checkpoints for the evaluation tests, written the way training writes them (a `zoo` section and the
model's state under `model.`), and configs composed the way evaluate.py composes them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from zoo.checkpoint import atomic_torch_save, zoo_section
from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from

CONF = Path(__file__).resolve().parents[2] / "conf"


def write_checkpoint(path: Path, model: torch.nn.Module, task: str, tokenizer, **extra) -> Path:
    """A training-format checkpoint of `model` (what ZooLightningModule.on_save_checkpoint adds; `extra`:
    more top-level entries, as task_state)."""
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    atomic_torch_save({"state_dict": state, "zoo": zoo_section(model.config, task, tokenizer), **extra}, path)
    return path


@pytest.fixture(scope="session")
def eval_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("eval_cache")


@pytest.fixture
def make_eval_cfg(tmp_path, eval_cache):
    """make_eval_cfg(overrides) -> conf/evaluate.yaml composed with them, writing under tmp_path."""

    def make(overrides: list[str]):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose("evaluate", overrides=[
                *overrides, f"paths.output_dir={tmp_path / 'eval'}", f"paths.cache_dir={eval_cache}",
            ])

    return make
