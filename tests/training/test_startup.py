"""`python train.py --help` (and any run's start-up until the config is composed) imports no torch,
Lightning, W&B, transformers or task code: Hydra composes the config from light registrations
(zoo.hydra_schema, zoo.training.callback_options, the decoding rules of zoo.generation.config), and train.py
imports the training app only once main runs (issue 42: --help took 5.8 s, 4.3 s of CPU of it importing
Lightning, 1 s torch)."""

from __future__ import annotations

import subprocess
import sys

from tests.train_config import CONF

ROOT = CONF.parent
HEAVY = ("torch", "lightning", "pytorch_lightning", "wandb", "transformers", "datasets", "tokenizers",
         "numpy", "torchmetrics", "zoo.tasks", "zoo.data", "zoo.training.callbacks", "zoo.training.run")
PROBE = ("import atexit, runpy, sys\n"
         "sys.argv = ['train.py', '--help']\n"
         "atexit.register(lambda: print('MODULES', ' '.join(sorted(sys.modules))))\n"
         "runpy.run_path('train.py', run_name='__main__')\n")


def test_train_help_imports_no_training_stack():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "== Config ==" in done.stdout and "callbacks:" in done.stdout  # the composed config is shown
    modules = done.stdout.rsplit("MODULES ", 1)[1].split()
    loaded = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert loaded == []
