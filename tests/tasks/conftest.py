"""Tiny configs for every registered task, composed the way train.py composes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import zoo.training  # noqa: F401  (registers model/_schema and data/auto)

CONF = Path(__file__).resolve().parents[2] / "conf"

# A small model of any architecture: gpt_nano's sizes with the task's arch and head.
TINY_MODEL = ["model=gpt_nano", "model.max_seq_len=32", "tokenizer.vocab_size=300", "batch_size=4"]
LABELS = {"pos": "good great fine", "neg": "bad awful poor", "mix": "so so okay"}


def tiny_data(kind: str, labelled_file: Path) -> list[str]:
    """Overrides naming small data of one corpus kind (a task reading a new kind adds a row here)."""
    return {
        "text": ["data=stdlib_text", "data.max_bytes=120000"],
        "pairs": ["data=translation_toy", "data.n_pairs=400", "data.n_test=20"],
        "labelled": ["data=classification", f"data.path={labelled_file}"],
    }[kind]


@pytest.fixture(scope="session")
def labelled_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("labelled") / "labelled.jsonl"
    path.write_text("".join(json.dumps({"text": f"{words} {i}", "label": label}) + "\n"
                            for i in range(40) for label, words in LABELS.items()), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One token cache for the session: each tokenizer is trained once."""
    return tmp_path_factory.mktemp("zoo_cache")


def compose_cfg(overrides: list[str], root: Path, cache_dir: Path):
    """The config train.py would compose, its run folders under `root`."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[
            *overrides, f"paths.output_dir={root / 'runs' / 'run'}", f"paths.runs_dir={root / 'runs'}",
            f"paths.cache_dir={cache_dir}",
        ])


@pytest.fixture
def make_cfg(tmp_path, cache_dir):
    """make_cfg(overrides) -> the composed config, writing under tmp_path."""
    return lambda overrides: compose_cfg(overrides, tmp_path, cache_dir)
