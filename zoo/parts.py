"""Typed settings owned by the part that reads them: `model.positional: {name: rope, base: 1e6, scaling:
{name: yarn, factor: 8}}`. Each registry entry (a positional scheme, a RoPE scaling, a token mixer) declares
a frozen dataclass of the keys it reads, registered under its name in a `Parts` table; `model.<key>` holds
one of them. A name alone (`positional: alibi`) is that entry with its defaults; choosing another name
replaces the whole subtree, so a key no chosen entry reads cannot arise: it is refused, naming the entry that
reads it.

Pure data (no torch): the config parses with it, the modules read the typed fields."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from zoo.options import Options
from zoo.registry import unknown_choice_message
from zoo.utils import did_you_mean

P = TypeVar("P", bound="Part")


@dataclasses.dataclass(frozen=True)
class Part:
    """Base of one entry's settings: its fields are the keys beside `name` under `model.<key>`."""

    name: ClassVar[str] = ""

    def to_data(self) -> dict[str, Any]:
        """{name, every key} as plain data (nested parts too): what checkpoints and exports store."""
        return {"name": self.name, **{f.name: _data(getattr(self, f.name)) for f in dataclasses.fields(self)}}

    def replaced(self: P, **changes: Any) -> P:
        return dataclasses.replace(self, **changes)


def _data(value: Any) -> Any:
    if isinstance(value, Part):
        return value.to_data()
    if isinstance(value, Mapping):
        return dict(value)
    return list(value) if isinstance(value, tuple) else value


class Parts:
    """The settings classes of one config key's entries (`model.positional`: none, learned, rope, ...).
    `parse` turns plain data into the chosen entry's settings, checking every key and value; `merge` lays
    overrides over settings (a new name replaces, the same name or none updates keys)."""

    def __init__(self, key: str, default: str) -> None:
        self.key, self.default = key, default
        self._classes: dict[str, type[Part]] = {}

    def register(self, name: str) -> Callable[[type[P]], type[P]]:
        """Class decorator: `cls` is the settings of entry `name`; a taken name raises."""

        def add(cls: type[P]) -> type[P]:
            if name in self._classes:
                raise ValueError(f"{self.key} {name!r} already has settings; pick another name.")
            cls.name = name
            self._classes[name] = cls
            return cls

        return add

    def names(self) -> list[str]:
        return sorted(self._classes)

    def inner(self, key: str) -> Parts | None:
        """The table of the nested part `key` of some entry (`scaling` of rope), or None."""
        tables = (t for cls in self._classes.values() for k, t in _parts_of(cls).items() if k == key)
        return next(tables, None)

    def mapping_keys(self) -> set[str]:
        """Keys some entry holds a plain mapping in (MoE's `balance`: loss -> coefficient), given whole."""
        return {f.name for cls in self._classes.values() for f in dataclasses.fields(cls)
                if isinstance(_default(f), dict)}

    def keys(self, name: str) -> list[str]:
        """The keys entry `name` reads (beside `name`)."""
        return [f.name for f in dataclasses.fields(self._classes[name])]

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def settings_class(self, name: str, path: str) -> type[Part]:
        if not isinstance(name, str) or name not in self._classes:
            raise ValueError(f"{path}: " + unknown_choice_message(self.key, name, self.names()))
        return self._classes[name]

    def defaults(self, name: str | None = None) -> Part:
        return self.settings_class(name or self.default, f"model.{self.key}")()

    def parse(self, value: Any, path: str | None = None) -> Part:
        """A name, a mapping with `name` (and the entry's keys) or settings -> that entry's settings.
        ValueError names `path.key`, the value and what is allowed; a key of another entry names its
        readers and says how to choose it."""
        path = path or f"model.{self.key}"
        if isinstance(value, Part) and value.name in self._classes:
            return value
        if value is None:
            return self.defaults()
        if isinstance(value, str):
            return self.settings_class(value, path)()
        if not isinstance(value, Mapping):
            raise ValueError(f"{path} must be a name ({', '.join(self.names())}) or a mapping with `name` "
                             f"and that entry's keys; got {value!r}.")
        data = dict(value)
        name = data.pop("name", self.default)
        cls = self.settings_class(name, f"{path}.name")
        return _build(cls, data, path, self)

    def merge(self, current: Part | None, override: Any, path: str | None = None) -> Part:
        """`override` laid over `current`: a name or a mapping naming another entry replaces it; a mapping
        without `name` (or with the same one) changes only the keys it gives (nested parts merge too)."""
        path = path or f"model.{self.key}"
        if current is None or isinstance(override, (str, Part)) or not isinstance(override, Mapping):
            return self.parse(override, path)
        data = dict(override)
        if data.get("name", current.name) != current.name:
            return self.parse(data, path)
        data.pop("name", None)
        merged = current.to_data()
        merged.pop("name")
        for key, given in data.items():
            held = getattr(current, key, None)
            inner = _parts_of(type(current)).get(key)
            merged[key] = inner.merge(held, given, f"{path}.{key}").to_data() \
                if inner is not None and isinstance(held, Part) else given
        return _build(type(current), merged, path, self)

    def docs(self) -> dict[str, dict[str, tuple[str, Any]]]:
        """entry -> key -> (allowed values in words, default): the source of the docs' key tables."""
        out = {}
        for name, cls in sorted(self._classes.items()):
            options = _options(cls)
            out[name] = {f.name: (options.rules[f.name].allowed, _default(f))
                         for f in dataclasses.fields(cls)}
        return out


def _default(f: dataclasses.Field) -> Any:
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default
    return _data(value)


@functools.cache
def _options(cls: type[Part]) -> Options:
    """The rules of `cls`'s fields, from their type hints (read once per class)."""
    return Options.of(cls)


@functools.cache
def _parts_of(cls: type[Part]) -> dict[str, Parts]:
    """Fields of `cls` that hold a nested part (`Annotated[Part, SCALINGS]`) -> the table it is parsed by."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {k: m for k, h in hints.items() if typing.get_origin(h) is typing.Annotated
            for m in h.__metadata__ if isinstance(m, Parts)}


def _build(cls: type[P], data: dict[str, Any], path: str, table: Parts) -> P:
    """`cls(**data)` with every key known to `cls` and every value its rule allows (nested parts parsed)."""
    known = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in known:
            others = [n for n in table.names() if key in table.keys(n)]
            where = (f" {path}.{key} is read by {table.key}={'|'.join(others)}: choose it with "
                     f"{path}={others[0]} (a new name replaces the whole {path})." if others
                     else did_you_mean(key, known))
            raise ValueError(f"{path}={cls.name} has no key {key!r}.{where} Its keys: "
                             f"{', '.join(known) or 'none'}.")
    nested = _parts_of(cls)
    for key, inner in nested.items():
        if key in data:
            data[key] = inner.parse(data[key], f"{path}.{key}")
    plain = {k: v for k, v in data.items() if k not in nested}
    flat_keys = [f.name for f in dataclasses.fields(cls) if f.name not in nested]
    _options(cls).only(*flat_keys).check(path, plain)
    return cls(**{k: tuple(v) if isinstance(v, list) else dict(v) if isinstance(v, Mapping) else v
                  for k, v in data.items()})
