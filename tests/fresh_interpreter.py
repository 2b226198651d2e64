"""One fresh Python interpreter for the checks that need one (this test process has imported everything
already): it runs STEPS in order and reports, after each, what the step printed and the modules in
`sys.modules`. One start and one torch import serve tests/test_import.py, tests/models/test_registry.py and
tests/pretrained/test_families.py (the `fresh_interpreter` fixture, tests/conftest.py), once per session
(tests/once.py: not once per xdist worker).

A step's modules include the earlier steps'. A check of "step X imports nothing from F" therefore sees at
least what X alone would import (nothing is missed); the steps are ordered so that no earlier step may
import what a later one forbids."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HYDRA_APP = ("defaults:\n  - model: llama_small\n  - _self_\n"
             "hydra:\n  searchpath:\n    - file://{conf}\n")
STEPS = {
    "import zoo": "import zoo",
    "core packages": "import zoo.models, zoo.modules, zoo.config",
    "build a preset": 'zoo.build("gpt_small")',
    # a user's own Hydra app using conf/model presets after `import zoo.hydra_schema`
    "hydra app": """
import tempfile, zoo.hydra_schema
from hydra import compose, initialize_config_dir
with tempfile.TemporaryDirectory() as app:
    open(app + "/app.yaml", "w").write(HYDRA_APP.format(conf=zoo.presets.config_root()))
    with initialize_config_dir(config_dir=app, version_base="1.3"):
        cfg = compose("app", overrides=["model.n_heads=4", "model.init_std=0.05"])
m = zoo.build(cfg.model)
print(m.config.n_heads, m.config.init_std, m.config.dropout)
""",
    "import zoo.pretrained": "import zoo.pretrained",
}
MODULES_FOLLOW, END = "-- modules --", "-- end of step --"


@dataclass(frozen=True)
class Step:
    printed: list[str]  # the step's own stdout, split on white space
    modules: set[str]  # sys.modules after the step


def run_steps() -> dict[str, Step]:
    """Step name -> what it printed and the modules loaded after it."""
    script = f"import sys\nHYDRA_APP = {HYDRA_APP!r}\n" + "".join(
        f"{code}\nprint({MODULES_FOLLOW!r})\nprint('\\n'.join(sys.modules))\nprint({END!r})\n"
        for code in STEPS.values())
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    chunks = out.stdout.split(END)[:len(STEPS)]
    assert len(chunks) == len(STEPS), out.stdout[-2000:]
    steps = {}
    for name, chunk in zip(STEPS, chunks, strict=True):
        printed, modules = chunk.split(MODULES_FOLLOW)
        steps[name] = Step(printed.split(), set(modules.split()))
    return steps


def write_steps(root: Path) -> None:
    """run_steps, saved as root/steps.json (once_per_session's `make`; nothing is written if a step fails)."""
    steps = run_steps()
    root.mkdir(parents=True)
    (root / "steps.json").write_text(json.dumps(
        {name: {"printed": step.printed, "modules": sorted(step.modules)} for name, step in steps.items()}))


def read_steps(root: Path) -> dict[str, Step]:
    saved = json.loads((root / "steps.json").read_text())
    return {name: Step(step["printed"], set(step["modules"])) for name, step in saved.items()}
