"""The registries behind the config's named choices (arch, activation, norm, positional)."""

from __future__ import annotations

from zoo.registry import Registry


def choice_registries() -> dict[str, Registry]:
    """Config key -> registry of allowed names; ModelConfig.validate checks every key against these."""
    import zoo.models  # noqa: F401  (registers the architectures)
    from zoo.models.base import ARCHS
    from zoo.modules.feedforward import ACTIVATIONS
    from zoo.modules.norm import NORMS
    from zoo.modules.positional import POSITIONALS

    return {"arch": ARCHS, "activation": ACTIVATIONS, "norm": NORMS, "positional": POSITIONALS}
