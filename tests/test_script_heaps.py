"""evaluate.py, generate.py, export.py, serve.py and inspect_model.py, each run as its process's script,
import their stack with the cyclic collector paused and then freeze that heap, as train.py does
(zoo.training.heap, issue 42): the collector no longer walks the 300,000-750,000 import objects in every full
collection and at exit, and the run's outputs are as before. A process that imports evaluate.py or
inspect_model.py as a module keeps its collector as it was; generate.py --help imports nothing, evaluate.py
--help neither Lightning nor torch."""

from __future__ import annotations

import gc
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_checkpoint_export import checkpoint

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT  # the package the scripts import
TEXT = "the quick brown fox jumps over the lazy dog. " * 40
# the script run as its process's script; at the very end of the process (the first atexit handler registered
# runs last) it reports how many objects the collector holds frozen, how many it still walks, and whether it
# is on
AS_SCRIPT = ("import atexit, gc, runpy, sys\n"
             "script = sys.argv[1]\n"
             "sys.argv = sys.argv[1:]\n"
             "heap = lambda: print('HEAP', gc.get_freeze_count(), len(gc.get_objects()), gc.isenabled())\n"
             "atexit.register(heap)\n"
             "runpy.run_path(script, run_name='__main__')\n")


def _as_script(tmp_path: Path, script: str, *args: str) -> tuple[subprocess.CompletedProcess, int, int, str]:
    """(process, objects frozen, objects the collector still tracks, collector on) at the process's end."""
    wrapper = tmp_path / "as_script.py"
    wrapper.write_text(AS_SCRIPT)
    proc = subprocess.run([sys.executable, str(wrapper), str(ROOT / script), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ZOO)})
    assert "HEAP " in proc.stdout, proc.stderr[-3000:]
    frozen, tracked, enabled = proc.stdout.rsplit("HEAP ", 1)[1].split()[:3]
    return proc, int(frozen), int(tracked), enabled


def _mostly_frozen(frozen: int, tracked: int, enabled: str) -> bool:
    """The import heap frozen (Lightning's alone is ~470,000 objects, torch's ~180,000), the collector on,
    and what it still walks at the end a small part of the process's objects."""
    return frozen > 150_000 and tracked < frozen // 4 and enabled == "True"


@pytest.mark.e2e  # an evaluate.py subprocess (Lightning's imports)
def test_evaluate_py_freezes_its_import_heap_and_writes_its_report(tmp_path):
    ckpt = checkpoint(tmp_path / "model.ckpt", 0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    out = tmp_path / "metrics.json"
    proc, frozen, tracked, enabled = _as_script(
        tmp_path, "evaluate.py", f"ckpt={ckpt}", "data=text", f"data.files={corpus}", f"output={out}",
        f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _mostly_frozen(frozen, tracked, enabled), (frozen, tracked, enabled)
    report = json.loads(out.read_text())
    assert report["split"] == "val" and report["metrics"]["perplexity"] > 1


@pytest.mark.e2e  # a generate.py subprocess
def test_generate_py_freezes_its_import_heap_and_prints_its_text(tmp_path):
    ckpt = checkpoint(tmp_path / "model.ckpt", 0)
    proc, frozen, tracked, enabled = _as_script(tmp_path, "generate.py", f"ckpt={ckpt}", "prompt=hello",
                                                "max_new_tokens=4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _mostly_frozen(frozen, tracked, enabled), (frozen, tracked, enabled)
    prompt, text = proc.stdout.splitlines()[:2]
    assert prompt == ">>> hello" and text.startswith("hello") and len(text) == len("hello") + 4  # char tokens


@pytest.mark.e2e  # an export.py subprocess
def test_export_py_freezes_its_import_heap_and_writes_the_whole_folder(tmp_path):
    ckpt = checkpoint(tmp_path / "model.ckpt", 0)
    out = tmp_path / "out"
    proc, frozen, tracked, enabled = _as_script(tmp_path, "export.py", f"ckpt={ckpt}", f"dir={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _mostly_frozen(frozen, tracked, enabled), (frozen, tracked, enabled)
    import zoo

    model, tokenizer = zoo.load(out)  # model.safetensors, config.json, tokenizer/
    assert model.config.d_model == 16 and tokenizer.vocab_size == model.config.vocab_size


@pytest.mark.e2e  # a serve.py subprocess: its imports, then a refused option (the server itself never starts)
def test_serve_py_freezes_its_import_heap_and_still_refuses_in_one_line(tmp_path):
    proc, frozen, tracked, enabled = _as_script(tmp_path, "serve.py", f"ckpt={tmp_path / 'missing.ckpt'}")
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert frozen > 150_000 and enabled == "True", (frozen, tracked, enabled)


@pytest.mark.e2e  # an inspect_model.py subprocess
@pytest.mark.parametrize("from_checkpoint", [False, True], ids=["fresh_model", "ckpt"])
def test_inspect_model_py_freezes_its_import_heap_and_writes_its_trace(tmp_path, from_checkpoint):
    """A checkpoint's run freezes torch._dynamo too (opening one imports it); a fresh model's does not."""
    out = tmp_path / "run"
    model = [f"ckpt={checkpoint(tmp_path / 'model.ckpt', 0)}"] if from_checkpoint else ["model=gpt_nano"]
    proc, frozen, tracked, enabled = _as_script(tmp_path, "inspect_model.py", *model, "text=hello",
                                                f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _mostly_frozen(frozen, tracked, enabled), (frozen, tracked, enabled)
    assert "parameters" in proc.stdout
    assert {"attention_decoder_layer0.png", "mask_decoder.png"} <= {p.name for p in out.glob("*.png")}
    assert json.loads((out / "trace.json").read_text())  # the shape trace, whole


@pytest.mark.parametrize("script", ["evaluate.py", "inspect_model.py"])
def test_script_imported_as_a_module_leaves_the_callers_collector_alone(script):
    before = gc.get_freeze_count()
    module = runpy.run_path(str(ROOT / script), run_name="imported_as_a_module")
    assert callable(module["cli"]) and gc.get_freeze_count() == before and gc.isenabled()


def test_generate_py_help_imports_nothing_heavy(tmp_path):
    probe = ("import runpy, sys\n"
             "sys.argv = ['generate.py', '--help']\n"
             "try:\n"
             f"    runpy.run_path({str(ROOT / 'generate.py')!r}, run_name='__main__')\n"
             "finally:\n"
             "    print('TORCH', 'torch' in sys.modules, 'zoo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "ckpt=path" in done.stdout and done.stdout.rsplit("TORCH ", 1)[1].split() == ["False", "False"]


def test_evaluate_py_help_imports_neither_lightning_nor_torch(tmp_path):
    """`python evaluate.py --help` prints Hydra's help from the composed config alone: the evaluation stack
    (Lightning, torchmetrics, torch) loads once there is a run, as train.py's does. Before: 3.2 s of CPU."""
    probe = ("import runpy, sys\n"
             "sys.argv = ['evaluate.py', '--help']\n"
             "try:\n"
             f"    runpy.run_path({str(ROOT / 'evaluate.py')!r}, run_name='__main__')\n"
             "finally:\n"
             "    print('HEAVY', 'lightning' in sys.modules, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ZOO)})
    assert "ckpt: ???" in done.stdout and done.stdout.rsplit("HEAVY ", 1)[1].split() == ["False", "False"]
