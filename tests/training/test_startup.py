"""`python train.py --help` (and any run's start-up until the config is composed) imports no torch,
Lightning, W&B, transformers or task code: Hydra composes the config from light registrations
(zoo.hydra_schema, zoo.training.callback_options, the decoding rules of zoo.generation.config), and train.py
imports the training app only once main runs (issue 42: --help took 5.8 s, 4.3 s of CPU of it importing
Lightning, 1 s torch)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from tests.train_config import CONF

from .conftest import TINY_LM, read_csv_metrics

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


# train.py run as its process's script, reporting at the very end of the process (the first atexit handler
# registered runs last: after W&B, logging and Lightning have finished) what the collector holds frozen
AS_SCRIPT = ("import atexit, gc, runpy, sys\n"
             "sys.argv = ['train.py', *sys.argv[1:]]\n"
             "atexit.register(lambda: print('FROZEN', gc.get_freeze_count(), gc.isenabled()))\n"
             f"runpy.run_path({str(ROOT / 'train.py')!r}, run_name='__main__')\n")


@pytest.mark.e2e  # a train.py subprocess
def test_the_script_freezes_its_import_heap_and_finishes_every_file(tmp_path, run_cli, cache_dir):
    """Issue 42: the training stack's ~470,000 import objects are kept out of the cyclic collector (1 s of
    CPU collecting during the imports, 1.4 s at exit); the collector stays on and the run's CSV metrics and
    checkpoints are complete when the process has exited."""
    script = tmp_path / "as_script.py"
    script.write_text(AS_SCRIPT)
    run_dir = tmp_path / "run"
    short = [o for o in TINY_LM if not o.startswith(("trainer.max_steps=", "eval_every="))]
    proc = run_cli([*short, "trainer.max_steps=4", "eval_every=2", "callbacks.samples=null",
                    f"hydra.run.dir={run_dir}", f"paths.cache_dir={cache_dir}"], script=script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frozen, enabled = proc.stdout.rsplit("FROZEN ", 1)[1].split()[:2]
    assert int(frozen) > 100_000 and enabled == "True"
    rows = read_csv_metrics(run_dir)
    assert [int(r["step"]) for r in rows if r.get("val/loss")] == [1, 3]  # both validations, the last one too
    import torch

    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 4 and (run_dir / "checkpoints" / "best.ckpt").exists()


def test_main_called_in_process_leaves_the_callers_collector_alone(tmp_path, monkeypatch):
    """A caller's process (a test calling train.cli()) is not train.py's: its heap is not frozen."""
    import train

    before = gc.get_freeze_count()
    run = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["train.py", f"ckpt_path={tmp_path / 'none.ckpt'}",
                                      f"hydra.run.dir={run}", f"paths.output_dir={run}"])
    with pytest.raises(SystemExit):  # the checkpoint is refused once main has imported the training stack
        train.cli()
    assert gc.get_freeze_count() == before and gc.isenabled()
