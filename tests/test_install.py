"""`zoo.build("name")` works after a plain, non-editable install, run from another directory."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # trains, spawns processes or drives a browser: outside the inner loop

ROOT = Path(__file__).resolve().parent.parent


def test_presets_ship_with_a_non_editable_install(tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
         str(target), str(ROOT)],
        check=True, capture_output=True,
    )
    code = (f"import zoo; assert zoo.__file__.startswith({str(target)!r}); "
            "print(zoo.build('gpt_small').num_parameters())")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": ""},
        check=True, capture_output=True, text=True,
    )
    assert int(out.stdout) > 10_000_000
