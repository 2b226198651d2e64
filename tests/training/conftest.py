"""Tiny training configs composed the way train.py composes them (hydra.compose, no @hydra.main)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from zoo.hydra_schema import part_overrides
from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"

# gpt_nano on a 120 KB slice of the stdlib corpus, vocab 300, 32-token windows: a run takes seconds.
TINY_LM = [
    "model=gpt_nano", "data=stdlib_text", "data.max_bytes=120000", "tokenizer.vocab_size=300",
    "model.max_seq_len=32", "batch_size=8", "logger=csv", "trainer.accelerator=cpu", "trainer.max_steps=6",
    "eval_every=3", "trainer.limit_val_batches=2", "trainer.log_every_n_steps=1",
    "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false",
    "callbacks.samples.max_new_tokens=8", "optim.lr=3e-3", "scheduler.warmup_steps=2",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One token cache for the whole session: the tokenizer is trained once."""
    return tmp_path_factory.mktemp("zoo_cache")


@pytest.fixture
def make_cfg(tmp_path, cache_dir):
    """make_cfg(overrides, run="run") -> composed config writing to tmp_path/<run>."""

    def make(overrides: list[str], run: str = "run"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose("config", overrides=[  # model.<part>=... as train.py reads it
                *part_overrides(overrides), f"paths.output_dir={tmp_path / 'runs' / run}",
                f"paths.runs_dir={tmp_path / 'runs'}", f"paths.cache_dir={cache_dir}",
            ])

    return make


def read_csv_metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def train_losses(run_dir: Path) -> dict[int, float]:
    """step -> train/loss from the CSV logger (Lightning writes `step` = global step at logging)."""
    return {int(r["step"]): float(r["train/loss"]) for r in read_csv_metrics(run_dir) if r.get("train/loss")}


def one_and_two_fsdp(tmp_path: Path, run_cli, make_cfg, cache_dir, overrides: list[str], batch_size: int,
                     steps: int) -> tuple[Path, Path]:
    """(run folder of one process at `batch_size`, last.ckpt folder of two FSDP processes at half of it each)
    from the same overrides, after checking that rank 1 wrote its shards and the two logged one process's
    train losses at steps 0 .. steps-1 (within 1e-5)."""
    from zoo.training.run import train

    one = train(make_cfg([*overrides, f"batch_size={batch_size}", "trainer=cpu"], run="one")).output_dir
    two = run_cli([*overrides, f"batch_size={batch_size // 2}", "trainer=fsdp", "trainer.accelerator=cpu",
                   "trainer.devices=2", f"hydra.run.dir={tmp_path / 'two'}", f"paths.cache_dir={cache_dir}"])
    assert two.returncode == 0, two.stderr[-3000:]
    folder = tmp_path / "two" / "checkpoints" / "last.ckpt"
    assert (folder / "__1_0.distcp").is_file()  # rank 1 wrote its shards
    single, sharded = train_losses(one), train_losses(tmp_path / "two")
    assert sorted(single) == sorted(sharded) == list(range(steps))
    for step in single:
        assert abs(sharded[step] - single[step]) <= 1e-5, (step, sharded[step], single[step])
    return one, folder


def killed_and_resumed(make_cfg, monkeypatch, common: list[str], name: str) -> tuple[dict, dict]:
    """(train losses of an uninterrupted run, train losses of a run killed at step 6 and resumed with
    ckpt_path=last from its latest checkpoint), both from the overrides `common`."""
    from zoo.training.module import ZooLightningModule
    from zoo.training.run import train

    straight = train_losses(train(make_cfg(common, run=f"{name}_straight")).output_dir)

    def killed(self, outputs, batch, batch_idx):
        if self.global_step == 6:
            raise RuntimeError("simulated kill")

    with monkeypatch.context() as m:
        m.setattr(ZooLightningModule, "on_train_batch_end", killed, raising=False)
        with pytest.raises(RuntimeError, match="simulated kill"):
            train(make_cfg(common, run=f"{name}_killed"))
    resumed = train(make_cfg([*common, "ckpt_path=last"], run=f"{name}_resumed"))
    return straight, train_losses(resumed.output_dir)


@pytest.fixture
def run_cli(tmp_path):
    """run_cli(args) -> `python train.py <args>` in tmp_path, with no W&B key, no ~/.netrc, no WANDB_* env
    (`script=`: another script that runs train.py, e.g. one that stops it on purpose)."""

    def run(args: list[str], timeout: int = 240, script: Path = ROOT / "train.py"
            ) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
        env.update({"HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"})
        (tmp_path / "home").mkdir(exist_ok=True)
        return subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout)

    return run
