"""Several training runs in one launch (`torchrun --nproc-per-node=N sharded_runs.py plan.json`): every
process composes each run's config as train.py would and trains it in turn, so N processes start (import
torch and Lightning, join the process group) once for all the runs of tests/training/test_sharded.py.

plan.json: {"conf": conf dir, "root": where run <name> writes (root/<name>), "cache_dir": the token cache,
"runs": [{"name": ..., "overrides": [...], "stop_at": step or null}]}. A run with `stop_at` raises in every
process at the end of that step (a simulated kill, after its earlier checkpoints), and the next run starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from zoo.training.hydra_configs import register_train_configs
from zoo.training.module import ZooLightningModule
from zoo.training.run import train

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from

KILLED = "simulated kill"


def stopping_at(step: int):
    def stop(self, outputs, batch, batch_idx):
        if self.global_step == step:
            raise RuntimeError(KILLED)

    return stop


def main(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    root = Path(plan["root"])
    for run in plan["runs"]:
        with initialize_config_dir(config_dir=plan["conf"], version_base="1.3"):
            cfg = compose("config", overrides=[
                *run["overrides"], f"paths.output_dir={root / run['name']}", f"paths.runs_dir={root}",
                f"paths.cache_dir={plan['cache_dir']}"])
        if run.get("stop_at") is None:
            train(cfg)
            continue
        original = ZooLightningModule.on_train_batch_end
        ZooLightningModule.on_train_batch_end = stopping_at(run["stop_at"])
        try:
            train(cfg)
        except RuntimeError as e:
            if KILLED not in str(e):
                raise
        else:
            raise RuntimeError(f"run {run['name']} was not stopped at step {run['stop_at']}")
        finally:
            ZooLightningModule.on_train_batch_end = original


if __name__ == "__main__":
    main(sys.argv[1])
