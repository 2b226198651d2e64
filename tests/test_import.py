"""`import zoo` is lazy (PEP 562): it imports no zoo submodule, and neither it nor `zoo.build("gpt_small")`
nor the core packages pull Hydra, Lightning, W&B, transformers, a pretrained family or the training app.
Each check runs in a fresh interpreter, since this one has imported everything already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import zoo

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("hydra", "omegaconf", "lightning", "pytorch_lightning", "wandb", "transformers", "tokenizers")
APPS = ("zoo.pretrained", "zoo.training", "zoo.data", "zoo.tasks", "zoo.evaluation", "zoo.finetune",
        "zoo.hydra_schema")


# One fresh interpreter runs these in order, each step importing more than the one before (a step's set
# includes the earlier steps', and each later step forbids no more than an earlier one: a module a step
# pulls in still shows, nothing is blamed on a step that an earlier one did not already answer for).
STEPS = {"import zoo": "import zoo",
         "core packages": "import zoo.models, zoo.modules, zoo.config",
         "build a preset": 'zoo.build("gpt_small")'}
END = "-- end of step --"


@pytest.fixture(scope="module")
def loaded_after() -> dict[str, set[str]]:
    """Step -> the modules in `sys.modules` after it, in one fresh interpreter from the checkout (one
    interpreter and one torch import for the three checks instead of three)."""
    script = "import sys\n" + "".join(f"{code}\nprint('\\n'.join(sys.modules))\nprint({END!r})\n"
                                      for code in STEPS.values())
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    sets = out.stdout.split(END)[:len(STEPS)]
    assert len(sets) == len(STEPS), out.stdout[-2000:]
    return {step: set(text.split()) for step, text in zip(STEPS, sets, strict=True)}


def offenders(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_import_zoo_imports_no_submodule(loaded_after):
    """The facade's names load on first use: `import zoo` alone runs no zoo module (nor torch, nor Hydra)."""
    assert offenders(loaded_after["import zoo"], ("zoo", "torch", *HEAVY)) == ["zoo"]


def test_core_packages_import_no_app(loaded_after):
    assert offenders(loaded_after["core packages"], HEAVY + APPS) == []


def test_building_a_preset_loads_only_the_core(loaded_after):
    """`zoo.build("gpt_small")`: config, registry, modules, models, presets and the YAML reader (omegaconf,
    which resolves interpolations in presets), but no Hydra, no app, no pretrained family."""
    modules = loaded_after["build a preset"]
    assert "zoo.presets" in modules and "omegaconf" in modules  # the step ran
    assert offenders(modules, tuple(h for h in HEAVY if h != "omegaconf") + APPS) == []


@pytest.mark.parametrize("name", zoo.__all__)
def test_every_public_name_resolves(name):
    """Each name in `__all__` imports from its module, is listed by `dir(zoo)` and is the object it names."""
    assert name in dir(zoo)
    value = getattr(zoo, name)
    assert callable(value) and getattr(value, "__name__", name).endswith(name)


def test_subpackages_and_unknown_names():
    """A subpackage is reachable after a plain `import zoo`, as with the eager facade; a typo is an error."""
    assert zoo.presets.config_root().is_dir()
    with pytest.raises(AttributeError, match="no attribute 'buld'"):
        zoo.buld  # noqa: B018
