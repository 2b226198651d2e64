"""Configs composed the way train.py composes them, HydraConfig included (init_from reads which model.* and
tokenizer keys were given on the command line from it), and the tiny pretrained folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train_config import compose_as_train, release_hydra_config

from .folders import bert_folder, corpus_file, gpt2_folder, labelled_file, pairs_file, t5_folder

FAST = ["logger=csv", "trainer.accelerator=cpu", "trainer.limit_val_batches=2",
        "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false", "callbacks.samples=null",
        "batch_size=4"]


@pytest.fixture
def make_run_cfg(tmp_path):
    """make_run_cfg(overrides, run="run") -> config with HydraConfig set as under @hydra.main."""

    def make(overrides: list[str], run: str = "run"):
        full = [*overrides, f"paths.output_dir={tmp_path / 'runs' / run}",
                f"paths.runs_dir={tmp_path / 'runs'}", f"paths.cache_dir={tmp_path / 'cache'}"]
        return compose_as_train(full)

    yield make
    release_hydra_config()


@pytest.fixture(scope="session")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pretrained")
    return {"gpt2": gpt2_folder(root / "gpt2"), "bert": bert_folder(root / "bert"),
            "t5": t5_folder(root / "t5"), "corpus": corpus_file(root / "data"),
            "labels": labelled_file(root / "data"), "pairs": pairs_file(root / "data")}
