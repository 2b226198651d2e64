"""Named model presets and `build`. Built-in presets are the YAML files under `conf/model/` (the same
files Hydra composes); users add more with `@register_model`."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from zoo.config import MODEL_SPEC, ModelConfig, lay_over
from zoo.registry import Registry, unknown_choice_message
from zoo.utils import plain_dict

_USER_PRESETS: Registry = Registry("model preset")


def config_root() -> Path:
    """The `conf/` directory: next to the package in a checkout, or installed as `zoo.conf`."""
    checkout = Path(__file__).resolve().parent.parent / "conf"
    if (checkout / "model").is_dir():
        return checkout
    return Path(str(resources.files("zoo.conf")))


@cache
def _yaml_presets() -> dict[str, Path]:
    folder = config_root() / "model"
    return {p.stem: p for p in sorted(folder.glob("*.yaml")) if not p.stem.startswith("_")}


def list_models(pattern: str = "*") -> list[str]:
    """Every preset name (built-in YAML and user-registered), optionally filtered by a glob."""
    names = set(_yaml_presets()) | set(_USER_PRESETS)
    return sorted(n for n in names if fnmatch.fnmatch(n, pattern))


def register_model(name: str) -> Callable:
    """Decorator: register `fn() -> ModelConfig | dict` as preset `name`. A taken name raises."""

    def add(fn: Callable[[], ModelConfig | Mapping[str, Any]]) -> Callable:
        if name in _yaml_presets():
            raise ValueError(f"model preset {name!r} is already registered "
                             f"(built-in conf/model/{name}.yaml).")
        _USER_PRESETS.register(name, fn)
        return fn

    return add


def preset_dict(name: str) -> dict[str, Any]:
    """The raw key/values of preset `name` (before ModelConfig defaults are laid under them)."""
    from omegaconf import OmegaConf

    if name in _yaml_presets():
        data = OmegaConf.to_container(OmegaConf.load(_yaml_presets()[name]), resolve=True)
        return {k: v for k, v in data.items() if k != "defaults"}
    if name in _USER_PRESETS:
        made = _USER_PRESETS.get(name)()
        return made.to_dict() if isinstance(made, ModelConfig) else dict(made)
    raise ValueError(unknown_choice_message("model preset", name, list_models()))


def resolve_config(spec: str | Mapping[str, Any] | ModelConfig, **overrides: Any) -> ModelConfig:
    """Preset name, mapping, OmegaConf node or ModelConfig, with keyword overrides laid on top. A part
    (positional, mixer, ffn, head) given as a name or a mapping naming another entry replaces the preset's;
    a mapping without a name changes only its keys (`zoo.config.lay_over`): `build("bert_small",
    head={"name": "classifier", "num_labels": 2})` drops the preset's masked-LM head knobs,
    `build("gpt2", positional={"base": 1e6})` is an error naming the entry that reads `base`."""
    if isinstance(spec, str):
        base: Any = preset_dict(spec)
    elif isinstance(spec, ModelConfig):
        base = spec.to_dict()
    else:
        base = plain_dict(spec, "model", expected=MODEL_SPEC)
    return ModelConfig.from_dict(lay_over(base, overrides))


def build(spec: str | Mapping[str, Any] | ModelConfig, **overrides: Any):
    """Build a model: `build("gpt_small")`, `build("gpt_small", n_heads=8)`, `build(cfg.model)`."""
    from zoo.models import build_model

    return build_model(resolve_config(spec, **overrides))
