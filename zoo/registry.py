"""A name -> object registry with loud errors: unknown names list the known ones, duplicates raise."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from zoo.utils import did_you_mean

T = TypeVar("T")


def unknown_choice_message(kind: str, value: object, allowed: list[str]) -> str:
    """One sentence naming the bad value, a close match if any, and every allowed value."""
    return f"Unknown {kind} {value!r}.{did_you_mean(value, allowed)} Allowed: {', '.join(sorted(allowed))}."


class Registry(Generic[T]):
    """Maps names to components (classes or factories) for one kind of thing, e.g. 'norm'. `key`, when
    given, is the config key that picks an entry (`data.name`); an unknown-name error starts with it."""

    def __init__(self, kind: str, key: str | None = None) -> None:
        self.kind = kind
        self.key = key
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """Register `obj` under `name`; usable as a decorator. A duplicate name raises."""

        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered; pick another name.")
            self._items[name] = item
            return item

        return add if obj is None else add(obj)

    def get(self, name: str) -> T:
        if name not in self._items:
            where = f"{self.key}: " if self.key else ""
            raise ValueError(where + unknown_choice_message(self.kind, name, list(self._items)))
        return self._items[name]

    def __getitem__(self, name: str) -> T:
        """`registry[name]` is `registry.get(name)`: an unknown name raises ValueError listing the known."""
        return self.get(name)

    def __len__(self) -> int:
        return len(self._items)

    def names(self, pattern: str = "*") -> list[str]:
        return sorted(n for n in self._items if fnmatch.fnmatch(n, pattern))

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
