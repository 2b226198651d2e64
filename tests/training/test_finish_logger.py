"""finish_logger closes a W&B run when there is one; a run without W&B (logger=csv|none) does not import
wandb just to learn that there is none (issue 42: 0.33 s of CPU at the end of every such run)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CSV_RUN = ("import sys, tempfile\n"
           "from lightning.pytorch.loggers import CSVLogger\n"
           "from zoo.training.loggers import finish_logger\n"
           "before = 'wandb' in sys.modules\n"
           "finish_logger(CSVLogger(tempfile.mkdtemp()), failed=False)\n"
           "finish_logger(None, failed=True)\n"
           "print(before, 'wandb' in sys.modules)\n")


@pytest.mark.e2e
def test_finishing_a_run_without_wandb_imports_no_wandb():
    done = subprocess.run([sys.executable, "-c", CSV_RUN], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"]
