"""W&B continuity: a resumed run continues the W&B run of its checkpoint (the id is saved in the checkpoint's
zoo section), offline too; a fresh run gets a new id."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from zoo.checkpoint import read_checkpoint
from zoo.training.run import train

from .conftest import TINY_LM

pytestmark = pytest.mark.e2e  # trains, spawns processes or drives a browser: outside the inner loop

WANDB = [o for o in TINY_LM if not o.startswith("logger=")] + ["logger=wandb", "callbacks.samples=null"]


def wandb_run_id(run_dir: Path) -> str:
    """The id of the run's offline W&B run: wandb names its file run-<id>.wandb (read from the name: the
    records are still being written by wandb's service process when train() returns)."""
    [run_file] = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    return Path(run_file).stem.removeprefix("run-")


def test_resumed_run_continues_the_wandb_run_offline(make_cfg, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    first = train(make_cfg([*WANDB, "trainer.max_steps=3", "eval_every=3"], run="first"))
    run_one = wandb_run_id(first.output_dir)
    assert read_checkpoint(first.last_checkpoint)["zoo"]["wandb_run_id"] == run_one
    resumed = train(make_cfg([*WANDB, "trainer.max_steps=6", "eval_every=3",
                              f"ckpt_path={first.last_checkpoint}"],
                             run="second"))
    assert wandb_run_id(resumed.output_dir) == run_one
    # and a third resume too
    assert read_checkpoint(resumed.last_checkpoint)["zoo"]["wandb_run_id"] == run_one
    fresh = train(make_cfg([*WANDB, "trainer.max_steps=1", "eval_every=1"], run="third"))
    assert read_checkpoint(fresh.last_checkpoint)["zoo"]["wandb_run_id"] not in (None, run_one)
