"""export.py (zoo.export.cli): key=value arguments, the same folder zoo.export writes, and bad input as one
`error:` line with exit code 1 and nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import zoo
from tests.test_checkpoint_export import checkpoint, files
from zoo.export.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ckpt(tmp_path):
    return checkpoint(tmp_path / "model.ckpt", 0)


def test_writes_what_zoo_export_writes(tmp_path, ckpt, capsys):
    assert main([f"ckpt={ckpt}", f"dir={tmp_path / 'cli'}"]) == 0
    assert files(tmp_path / "cli") == files(zoo.export(ckpt, tmp_path / "api"))
    assert f"exported {ckpt} to {tmp_path / 'cli'} (format zoo)" in capsys.readouterr().out


def test_hf_format_takes_the_family_as_an_option(tmp_path, ckpt):
    assert main([f"ckpt={ckpt}", f"dir={tmp_path / 'hf'}", "format=hf", "model_type=gpt2"]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "gpt2"
    assert {"model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "hf").iterdir()}


@pytest.mark.parametrize(("args", "message"), [
    (["dir={out}"], "ckpt is required; usage: python export.py ckpt="),
    (["ckpt={ckpt}"], "dir is required"),
    (["ckpt", "dir={out}"],
     "Arguments are key=value, got 'ckpt'. Known keys: ckpt, dir, format, dtype, model_type"),
    (["ckpt={tmp}/missing.ckpt", "dir={out}"], "checkpoint not found: {tmp}/missing.ckpt"),
    (["ckpt={ckpt}", "dir={out}", "format=onnx"], "Unknown export format 'onnx'. Allowed: gguf, hf, zoo."),
    (["ckpt={ckpt}", "dir={out}", "model_type=gpt2"], "export format 'zoo' has no option 'model_type'"),
    (["ckpt={ckpt}", "dir={out}", "format=hf", "model_type=gtp2"], "Unknown Hugging Face model_type 'gtp2'"),
    (["ckpt={ckpt}", "dir={out}", "format=hf", "modeltype=gpt2"],
     "Unknown key 'modeltype'. Did you mean 'model_type'? Known keys: ckpt, dir, format, dtype, model_type."),
    (["ckpt={ckpt}", "dir={tmp}/model.ckpt"],
     "dir={tmp}/model.ckpt is a file, not a folder (a zoo export is a folder); choose a new path"),
    (["ckpt={ckpt}", "dir={tmp}/model.ckpt/out"],
     "dir={tmp}/model.ckpt/out cannot be written: {tmp}/model.ckpt is a file, not a folder; choose a new"),
    (["ckpt={ckpt}", "dir={out}", "format=gguf", "dtype=q5_k"],
     "GGUF export dtype='q5_k' is not supported; allowed: f32, f16, q8_0, q4_0."),
    (["ckpt={ckpt}", "dir={out}", "format=gguf", "model_type=olmo2"],
     "GGUF export does not support the 'olmo2' family; supported: llama, mistral, qwen2, qwen3, phi3, gpt2, "
     "gemma2, gemma3_text"),
    (["ckpt={ckpt}", "dir={out}", "format=gguf"],
     "the char tokenizer is a WordLevel model; GGUF export carries byte-level BPE tokenizers only"),
], ids=["no-ckpt", "no-dir", "bare", "missing-ckpt", "unknown-format", "option-of-another-format",
        "unknown-family", "unknown-key", "dir-is-a-file", "dir-under-a-file", "gguf-dtype", "gguf-family",
        "gguf-char-tokenizer"])
def test_bad_input_is_one_error_line(tmp_path, ckpt, capsys, args, message):
    out = tmp_path / "out"
    argv = [a.format(ckpt=ckpt, out=out, tmp=tmp_path) for a in args]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message.format(tmp=tmp_path) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ckpt"]  # nothing written, no staging left


def test_a_folder_that_cannot_be_written_is_named_before_the_export(tmp_path, ckpt, capsys, monkeypatch):
    """A read-only parent (the access check, as a non-root user meets it: root may write anywhere, so the
    check is given the folder's answer here), and a staging folder the system refuses to create: one error
    naming dir=, never zoo's staging name."""
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != locked and access(p, mode, **kw))
    assert main([f"ckpt={ckpt}", f"dir={locked / 'out'}"]) == 1
    err = capsys.readouterr().err
    assert err == (f"error: dir={locked / 'out'} cannot be written: no permission to write in {locked} "
                   "(read-only?); choose a folder you can write in.\n")
    monkeypatch.undo()

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refused)
    assert main([f"ckpt={ckpt}", f"dir={locked / 'out'}"]) == 1
    err = capsys.readouterr().err
    assert err == (f"error: dir={locked / 'out'} cannot be written: Permission denied; choose a folder you "
                   "can write in.\n")
    assert not os.listdir(locked)


def test_help_prints_the_usage(capsys):
    assert main(["--help"]) == 0
    assert "python export.py ckpt=PATH dir=OUT" in capsys.readouterr().out


def test_the_package_stays_callable_as_zoo_export(tmp_path, ckpt):
    """`import zoo.export` binds the package to `zoo.export`; calling it still exports."""
    import zoo.export

    assert zoo.export(ckpt, tmp_path / "out") == tmp_path / "out"


@pytest.mark.e2e
def test_export_py_exits_1_with_one_error_line(tmp_path, ckpt):
    def run(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "export.py", f"ckpt={ckpt}", f"dir={tmp_path / 'out'}", *args]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)

    proc = run("format=onnx")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["error: Unknown export format 'onnx'. Allowed: gguf, hf, zoo."]
    proc = run()
    assert proc.returncode == 0 and zoo.load(tmp_path / "out")[0] is not None, proc.stderr
