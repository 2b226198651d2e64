"""One `train.py init_from=<folder> task=classification` run in-process, as the command line composes it: a
two-label toy set (animals vs things) the head learns in 40 steps. Shared by the families' fine-tune tests."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any


def train_classifier_from(folder: Path, tmp_path: Path) -> Any:
    """Fine-tune the folder's model on the toy set (csv logger, CPU); returns zoo's TrainResult."""
    from tests.train_config import compose_as_train, release_hydra_config
    from zoo.training.run import train

    rng = random.Random(0)
    animals, things = ["cat", "dog"], ["mat", "house", "sentence", "model", "text"]
    rows = [{"text": f"the {rng.choice(['big', 'small', 'red'])} {rng.choice(pool)} sat on the mat",
             "label": label} for _ in range(60) for pool, label in ((animals, "animal"), (things, "thing"))]
    data = tmp_path / "labels.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    overrides = [f"init_from={folder}", "task=classification", "data=classification", f"data.path={data}",
                 "logger=csv", "trainer.accelerator=cpu", "trainer.num_sanity_val_steps=0",
                 "callbacks.samples=null", "trainer.enable_progress_bar=false", "batch_size=8",
                 "trainer.max_steps=40", "eval_every=40", "optim.lr=3e-3", "scheduler.warmup_steps=2",
                 f"paths.output_dir={tmp_path / 'run'}", f"paths.runs_dir={tmp_path}",
                 f"paths.cache_dir={tmp_path / 'cache'}"]
    cfg = compose_as_train(overrides)
    try:
        return train(cfg)
    finally:
        release_hydra_config()
