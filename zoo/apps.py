"""What the apps share (train.py, evaluate.py, generate.py, inspect_model.py, serve.py, zoo.embedding): the
one error bad input becomes, the `key=value` command line of the apps without Hydra (and a value quoted for
those with it), the `device=` they run on, the composed config as plain data, `data=auto` resolved by the
task, and a model opened from a checkpoint or an export with its file read once."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import types
import typing
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from zoo.options import Rule
from zoo.utils import did_you_mean


class ConfigError(ValueError):
    """Bad input found before any work starts (one clear `error:` line, exit code 1)."""


@contextlib.contextmanager
def bad_input(context: str = "") -> Iterator[None]:
    """The one handler where an app prepares or opens its run: a ValueError a check raises inside is bad
    input, the ConfigError (one `error:` line), `context` (the key it concerns, e.g. `ckpt_path=...: `)
    before it; a ConfigError raised inside passes as it is."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"{context}{e}") from None


T = TypeVar("T")
_KINDS = {bool: "true or false", int: "an integer", float: "a number"}  # the typed keys' value words


def _field_kind(hint: Any) -> tuple[type, bool]:
    """(base type, whether null is allowed) of a field annotated `X` or `X | None`."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        return next(a for a in args if a is not type(None)), True
    return hint, False


def bad_value(key: str, raw: str, allowed: str) -> str:
    """The one wording of a command-line value its key does not take: "port='x' is not an integer."."""
    return f"{key}={raw!r} is not {allowed}."


def _typed_value(key: str, raw: str, base: type, optional: bool) -> Any:
    """A typed key's value read as Hydra reads one (YAML: `3`, `true`, `1e-3`; `null` where None is allowed),
    checked for its type: a comment, an empty value or a mapping is refused, not read as None."""
    import yaml

    allowed = _KINDS[base] + (" or null" if optional else "")
    if optional and raw == "null":
        return None
    try:
        value = yaml.safe_load(raw)
    except (yaml.YAMLError, ValueError, RecursionError):  # not YAML, past Python's int digits, deep nesting
        value = raw
    if isinstance(value, str):  # what YAML leaves as text but Python reads as a number: 1e-3, 0x10
        try:
            value = float(value) if base is float else int(value) if base is int else value
        except ValueError:
            pass
    if base is bool and isinstance(value, bool):
        return value
    if base in (int, float) and isinstance(value, int | float) and not isinstance(value, bool):
        if base is float or isinstance(value, int):
            return base(value)
    raise ValueError(bad_value(key, raw, allowed))


# A path key's rule (ckpt=, dir=, out=, folder=, ...): `ckpt=` with nothing after it names no file
PATH = Rule(lambda v: v is None or v != "", "a non-empty path")


def cli_key(default: Any = None, rule: Rule | None = None) -> Any:
    """A dataclass field of a command line's schema: its default and, beyond its type, the zoo.options
    Rule its value must pass (`parse_key_values` words a value it refuses as `bad_value`)."""
    return dataclasses.field(default=default, metadata={"rule": rule} if rule is not None else {})


def parse_key_values(argv: Sequence[str], schema: type[T], nullable: Collection[str] = ()) -> T:
    """The one parser of the small command lines (generate.py, serve.py, python -m zoo.embedding,
    export.py, python -m zoo.training.consolidate): `key=value` arguments (each key once, a leading `+`
    allowed) -> an instance of the dataclass `schema`, which declares the keys, their types and defaults.
    A text key (a `str` field: a prompt, a system message, a path, a name) takes everything after the first
    `=` as it is: colons, `#`, braces, quotes, `${...}`, newlines; `null` means None only for the `nullable`
    ones. A typed key (bool, int, float, or one of them or None) reads its value as YAML, as Hydra does. A
    field's `cli_key` rule checks the value read. Bad input is one ValueError naming the argument or key
    and what is allowed, in the same words for every command line."""
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    known = list(fields)
    given: dict[str, Any] = {}
    for arg in argv:
        key, sep, raw = arg.partition("=")
        key = key.removeprefix("+")
        if not sep or not key:
            raise ValueError(f"Arguments are key=value, got {arg!r}. Known keys: {', '.join(known)}.")
        if key not in known:
            hint = did_you_mean(key, known)
            raise ValueError(f"Unknown key {key!r}.{hint} Known keys: {', '.join(known)}.")
        if key in given:
            raise ValueError(f"{key}= is given twice; give it once.")
        base, optional = _field_kind(hints[key])
        if base is str:
            value = None if optional and key in nullable and raw == "null" else raw
        else:
            value = _typed_value(key, raw, base, optional)
        rule = fields[key].metadata.get("rule")
        if rule is not None and not rule.test(value):
            raise ValueError(bad_value(key, raw, rule.allowed))
        given[key] = value
    return schema(**given)


def available_devices() -> list[str]:
    """The devices torch can use on this machine: cpu, then cuda / cuda:i and mps where present."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        found.append("mps")
    return found


def check_device(name: str) -> None:
    """Raise naming `device` when torch cannot use it here (e.g. device=cuda on a CPU-only install): the
    `device=` key of generate.py and serve.py."""
    import torch

    available = available_devices()
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or (device.type != "cpu" and str(device) not in available):
        raise ValueError(f"device={name!r} is not available on this machine; "
                         f"available: {', '.join(available)}.")


def hydra_value(text: str) -> str:
    """`text` as the value of a Hydra override (train.py's, evaluate.py's) that reads back as this very
    string: as it is where Hydra's grammar keeps it, else single-quoted (quotes, backslashes before a quote or
    at the end, and OmegaConf's `${` escaped)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        if "${" not in text and OverridesParser.create().parse_override(f"k={text}").value() == text:
            return text
    except (HydraException, ValueError):  # its grammar cannot read the text as it is (or 5,000 digits)
        pass
    literal = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)  # OmegaConf: not interpolated
    quoted = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), literal)
    return f"'{quoted}'"


def _reads_as_text(value: str, multirun: bool = False) -> bool:
    """Whether Hydra's grammar reads `value` as a string it keeps: already quoted, or plain text it leaves as
    it is (no interpolation), or Hydra's `null`; under `--multirun`, a sweep (`a,b`, `glob(*)`) is meant as
    one and kept too."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_override(f"k={value}")
        if multirun and override.is_sweep_override():
            return True
        parsed = override.value()
    except (HydraException, ValueError):
        return False
    if parsed is None:
        return value == "null"
    quoted = len(value) > 1 and value[0] == value[-1] and value[0] in "'\""
    return isinstance(parsed, str) and (quoted or (parsed == value and "${" not in value))


def literal_overrides(argv: Sequence[str], keys: Collection[str]) -> list[str]:
    """A Hydra app's command line with the values of its text `keys` (a text to inspect, a checkpoint path)
    quoted for Hydra's grammar (`hydra_value`), so that `text=def f(x): # c` or `ckpt=epoch=1.ckpt` is taken
    as typed; a value Hydra already reads as that text (quoted, plain, `null`) is left as it is, and so is a
    sweep under `-m` (`init_from=a,b` sweeps; without `-m` it is one path with a comma)."""
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") in keys and not _reads_as_text(value, multirun):
            arg = f"{key}={hydra_value(value)}"
        out.append(arg)
    return out


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
    return open_trained(path)[:3]


def open_trained(path: str | Path) -> tuple[Any, Any, str | None, dict[str, Any] | None]:
    """`open_model`'s three and the task's state the checkpoint keeps (`task_state`: task=dpo's settings),
    from the same one read (a file, or a sharded checkpoint folder); None for an export folder or a
    checkpoint without one."""
    from zoo.checkpoint import Checkpoint, is_sharded
    from zoo.loader import from_checkpoint, load

    if not (Path(path).is_file() or is_sharded(path)):  # a sharded folder keeps its task state in meta.pt
        return (*load(path), None, None)
    ckpt = Checkpoint.read(path)
    return (*from_checkpoint(ckpt), ckpt.record.task, ckpt.data.get("task_state"))
