"""docs/make_ladder.py --quick: every rung and aside trains through train.py's path, the page is assembled,
and the trained top rung's explorer page is written and screenshotted (a few steps each; nothing under docs/
is touched)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # trains, spawns processes or drives a browser: outside the inner loop

ROOT = Path(__file__).resolve().parents[2]


def test_ladder_script_quick_run(capsys, monkeypatch):
    docs_before = _docs()
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # the import caches no make_ladder.pyc in docs/
    spec = importlib.util.spec_from_file_location("make_ladder", ROOT / "docs" / "make_ladder.py")
    ladder = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "make_ladder", ladder)  # its dataclass looks its module up
    spec.loader.exec_module(ladder)
    assert ladder.main(["--quick"]) == 0
    page = capsys.readouterr().out
    for i, (preset, _) in enumerate(ladder.RUNGS, start=1):
        assert f"| {i} | `{preset}` |" in page
    assert "`model=single_head_lm model.residual=false model.norm=none`" in page
    # the screenshot was taken (Chromium + playwright, as CI installs)
    assert "(the most concentrated)" in page
    assert _docs() == docs_before


def _docs() -> dict:
    """Each file under docs/ -> its modification time (Python's bytecode caches aside)."""
    return {p: p.stat().st_mtime for p in (ROOT / "docs").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}
