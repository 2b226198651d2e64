"""What the apps share (train.py, evaluate.py, generate.py, inspect_model.py): the one error bad input
becomes, the composed config as plain data, `data=auto` resolved by the task, and a model opened from a
checkpoint or an export with its file read once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """Bad input found before any work starts (one clear `error:` line, exit code 1)."""


def checked(check: Callable[..., Any], *args: Any, context: str = "") -> Any:
    """Run one validation step; its ValueError becomes a ConfigError (one `error:` line), `context` (the key
    it concerns, e.g. `ckpt_path=...: `) before it."""
    try:
        return check(*args)
    except ValueError as e:
        raise ConfigError(f"{context}{e}") from None


def plain(cfg: DictConfig | Mapping[str, Any], example: str | None = None) -> dict[str, Any]:
    """The composed config as plain data, resolved. Given the app's `example` command, a required key left
    unset (`???`) is named first; without it, the checks of each key say what is missing in their words."""
    if not isinstance(cfg, DictConfig):
        return dict(cfg)
    missing = sorted(OmegaConf.missing_keys(cfg)) if example else []
    if missing:
        raise ConfigError(f"{missing[0]} is required, e.g. {example}")
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:  # an interpolation error names its key
        raise ConfigError(f"config does not resolve: {e}") from None


def resolve_data(data_cfg: dict[str, Any], task) -> dict[str, Any]:
    """`data=auto` (the default) becomes the task's built-in data, conf/data/<task.builtin_data>.yaml, with
    any extra keys given on the command line (`+data.max_bytes=...`) laid on top."""
    from zoo.presets import config_root

    if data_cfg.get("name") != "auto":
        return data_cfg
    if task.builtin_data is None:
        raise ConfigError(f"task={task.name} has no built-in data; name one, e.g. {task.user_data}")
    path = config_root() / "data" / f"{task.builtin_data}.yaml"
    if not path.is_file():
        raise ConfigError(f"task {task.name}'s built-in data {task.builtin_data!r}: no such data config "
                          f"{path}")
    base = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    return {**base, **{k: v for k, v in data_cfg.items() if k != "name"}}


def open_model(path: str | Path) -> tuple[Any, Any, str | None]:
    """(model, tokenizer, task) of a training checkpoint, read once (the task it was trained on), or of an
    export folder (task None: the model's default applies); CheckpointError naming the file for anything else
    and for a checkpoint saved without its tokenizer. The model is in eval mode on CPU."""
    from zoo.checkpoint import Checkpoint
    from zoo.loader import from_checkpoint, load

    if not Path(path).is_file():
        return (*load(path), None)
    ckpt = Checkpoint.read(path)
    return (*from_checkpoint(ckpt), ckpt.record.task)
