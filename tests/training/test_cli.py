"""End-to-end `python train.py` runs (subprocesses, gpt_nano, a few steps): W&B offline with the logged
metrics in its run directory, DDP over 2 gloo CPU processes vs one process, multirun, and bad input.
Only what needs the script runs as a subprocess (Hydra's launcher, DDP, the exit status and `error:` line);
reference runs are trained in-process with the same overrides, composed as train.py composes them."""

from __future__ import annotations

import glob
import hashlib
from pathlib import Path

import pytest

from zoo.training.run import train

from .conftest import train_losses
from .wandb_reader import config_keys, history

pytestmark = pytest.mark.e2e  # trains, spawns processes or drives a browser: outside the inner loop

SMOKE = ["experiment=smoke", "data.max_bytes=120000", "tokenizer.vocab_size=300", "model.max_seq_len=32",
         "trainer.log_every_n_steps=1", "trainer.num_sanity_val_steps=0"]


def _digest(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_default_logger_is_wandb_offline_with_metrics_on_disk(tmp_path, run_cli, cache_dir):
    run_dir = tmp_path / "run"
    proc = run_cli([*SMOKE, "logger=wandb", "trainer.max_steps=6", "eval_every=3", f"hydra.run.dir={run_dir}",
                    f"paths.cache_dir={cache_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "W&B offline" in proc.stdout and "wandb sync" in proc.stdout
    assert "=== samples (lm) ===" in proc.stdout
    assert ((run_dir / "checkpoints" / "last.ckpt").exists()
            and (run_dir / "checkpoints" / "best.ckpt").exists())
    [run_file] = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    rows = history(Path(run_file))
    logged = set().union(*rows)
    for key in ("train/loss", "train/ppl", "train/tokens_per_s", "train/lr", "train/grad_norm", "val/loss",
                "val/ppl"):
        assert key in logged, f"{key} not in the offline run's history: {sorted(logged)}"
    [table] = [r for r in rows if "samples/_type" in r]  # the table of generated samples
    assert table["samples/_type"] == "table-file" and table["samples/nrows"] == 3
    assert {"model", "optim", "trainer", "parameters", "parameter_counts", "flops_per_token",
            "model_final"} <= config_keys(Path(run_file))
    assert [r["val/loss"] for r in rows if "val/loss" in r][-1] < 5.7  # below ln(300)


def test_ddp_two_cpu_processes_match_one_process(tmp_path, run_cli, make_cfg, cache_dir):
    common = [*SMOKE, "trainer.max_steps=3", "eval_every=3", "callbacks.samples=null"]
    train(make_cfg([*common, "trainer=cpu", "batch_size=8"], run="one"))  # the reference, in-process
    two = run_cli([*common, "trainer=ddp_cpu", "batch_size=4", f"hydra.run.dir={tmp_path / 'two'}",
                   f"paths.cache_dir={cache_dir}"])
    assert two.returncode == 0, two.stderr[-3000:]
    single, ddp = train_losses(tmp_path / "runs" / "one"), train_losses(tmp_path / "two")
    assert sorted(single) == sorted(ddp) == [0, 1, 2]
    for step in single:  # same global batch of 8 windows, averaged gradients: the same trajectory
        assert ddp[step] == pytest.approx(single[step], abs=1e-4)
    assert not (tmp_path / "outputs").exists()  # one output directory for the DDP job


def test_multirun_gives_separate_runs(tmp_path, run_cli, cache_dir):
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", *SMOKE, "model.n_heads=1,2", "trainer.max_steps=2", "eval_every=2",
                    "callbacks.samples=null", f"hydra.sweep.dir={sweep}", f"paths.cache_dir={cache_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job, heads in (("0", 1), ("1", 2)):
        assert (sweep / job / "checkpoints" / "last.ckpt").exists()
        assert f"model.n_heads={heads}" in (sweep / job / ".hydra" / "overrides.yaml").read_text()


def test_bad_input_exits_nonzero_with_one_error_and_touches_no_earlier_run(tmp_path, run_cli, make_cfg,
                                                                           cache_dir):
    """The script's exit path for a bad input; each message is checked in-process by
    tests/training/bad_inputs.py (a misspelled key such as trainer.max_stepz fails at compose time:
    tests/training/test_config.py)."""
    train(make_cfg([*SMOKE, "trainer.max_steps=2", "eval_every=2", "callbacks.samples=null"], run="earlier"))
    runs, earlier = tmp_path / "runs", tmp_path / "runs" / "earlier"
    before = _digest(earlier)
    assert any(name.endswith("last.ckpt") for name in before)
    bad = run_cli([*SMOKE, "model.n_heads=4", f"ckpt_path={earlier / 'checkpoints' / 'last.ckpt'}",
                   f"paths.cache_dir={cache_dir}", f"paths.runs_dir={runs}", f"hydra.run.dir={runs / 'bad'}"])
    assert bad.returncode == 1
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "model.n_heads: checkpoint 2, this run 4" in errors[0]
    assert "Traceback" not in bad.stderr
    assert _digest(earlier) == before
