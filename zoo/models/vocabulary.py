"""The model config vocabulary: every ModelConfig key, who reads it, and the one check of a config.

The spine keys have their rules in `zoo.config.MODEL_OPTIONS`; the parts (positional, mixer, ffn, head,
layer pattern) are typed settings checked when parsed, and each chosen module's `check_config` checks what
they say with the rest of the config. `check_config` checks a config in one pass (`validate`) and remembers
it, so a config built several times (planned on the meta device, then for real) is checked once.
docs/design.md, "Config parts"."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import fields

from zoo.config import MODEL_OPTIONS, ModelConfig, check_sizes
from zoo.modules.attention import MIXERS
from zoo.modules.feedforward import ACTIVATIONS, FFNS
from zoo.modules.heads import HEADS
from zoo.modules.layer_pattern import check_layers
from zoo.modules.norm import NORMS
from zoo.modules.positional import POSITIONALS
from zoo.modules.residual import WIRINGS
from zoo.options import Options
from zoo.registry import Registry, unknown_choice_message

ARCHS: Registry = Registry("arch")  # the builders register themselves (zoo.models.decoder, ...)
NO_OPTIONS = Options({})


def named_choices() -> dict[str, Registry]:
    """Config key -> the registry its name is resolved in."""
    return {"arch": ARCHS, "activation": ACTIVATIONS, "norm": NORMS, "norm_placement": WIRINGS}


def parts() -> dict[str, Registry]:
    """Config key holding typed settings -> the registry of the modules its names build (each module class
    checks what its settings say with the rest of the config: `check_config`)."""
    return {"positional": POSITIONALS, "mixer": MIXERS, "ffn": FFNS, "head": HEADS}


_PART_FIELDS = ("positional", "mixer", "linear_mixer", "ffn", "layer_pattern", "head")  # checked when parsed


@functools.cache
def _hint_options() -> Options:
    """A rule from its type hint for every field (a field added without a declared rule is still typed)."""
    return Options.of(ModelConfig, skip=_PART_FIELDS)


def validate(cfg: ModelConfig) -> None:
    """The one validation pass: names resolve, every value its rule allows, the sizes agree, and each chosen
    entry's needs hold (`check_config` classmethods).
    ValueError naming the key, the value and what is allowed."""
    values = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in _PART_FIELDS}
    choices = named_choices()
    for key, registry in choices.items():  # a misspelled name first: 'ropee' -> did you mean 'rope'?
        if isinstance(values[key], str) and values[key] not in registry:
            raise ValueError(f"model.{key}: " + unknown_choice_message(key, values[key], registry.names()))
    Options({**_hint_options().rules, **MODEL_OPTIONS.rules}).check("model", values)
    check_sizes(cfg)
    check_layers(cfg, POSITIONALS.get(cfg.positional.name).rotates)
    for key, registry in parts().items():
        check = getattr(registry.get(getattr(cfg, key).name), "check_config", None)
        if check is not None:
            check(cfg)
    if cfg.linear_mixer is not None:  # a hybrid: the linear layers' mixer checks itself as they read it
        check = getattr(MIXERS.get(cfg.linear_mixer.name), "check_config", None)
        if check is not None:
            check(dataclasses.replace(cfg, mixer=cfg.linear_mixer))
    for key, registry in choices.items():
        if values[key] is not None:
            check = getattr(registry.get(values[key]), "check_config", None)
            if check is not None:
                check(cfg)


_CHECKED: dict[str, None] = {}  # configs (by value) that passed: a run builds one several times


def check_config(cfg: ModelConfig) -> None:
    """Check `cfg` (`validate`) unless a config equal to it passed before: one ValueError naming the key
    before any module is built."""
    key = repr(cfg)
    if key in _CHECKED:
        return
    validate(cfg)
    if len(_CHECKED) > 256:  # a sweep in one process: keep the memo small
        _CHECKED.clear()
    _CHECKED[key] = None
