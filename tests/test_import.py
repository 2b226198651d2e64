"""`import zoo` is lazy (PEP 562): it imports no zoo submodule, and neither it nor `zoo.build("gpt_small")`
nor the core packages pull Hydra, Lightning, W&B, transformers, a pretrained family or the training app.
Each check reads a fresh interpreter (tests/fresh_interpreter.py), since this one has imported everything
already."""

from __future__ import annotations

import pytest

import zoo

HEAVY = ("hydra", "omegaconf", "lightning", "pytorch_lightning", "wandb", "transformers", "tokenizers")
APPS = ("zoo.pretrained", "zoo.training", "zoo.data", "zoo.tasks", "zoo.evaluation", "zoo.finetune",
        "zoo.hydra_schema")


def offenders(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_import_zoo_imports_no_submodule(fresh_interpreter):
    """The facade's names load on first use: `import zoo` alone runs no zoo module (nor torch, nor Hydra)."""
    assert offenders(fresh_interpreter["import zoo"].modules, ("zoo", "torch", *HEAVY)) == ["zoo"]


def test_core_packages_import_no_app(fresh_interpreter):
    assert offenders(fresh_interpreter["core packages"].modules, HEAVY + APPS) == []


def test_building_a_preset_loads_only_the_core(fresh_interpreter):
    """`zoo.build("gpt_small")`: config, registry, modules, models, presets and the YAML reader (omegaconf,
    which resolves interpolations in presets), but no Hydra, no app, no pretrained family."""
    modules = fresh_interpreter["build a preset"].modules
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
