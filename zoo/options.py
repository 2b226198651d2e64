"""Which keys a config group accepts and which values each key takes, checked with one clear message.

An `Options` is a mapping key -> `Rule`. Registry entries whose options are keyword parameters (data
sources, tokenizers, schedules, loggers) declare them by their signature: `Options.of(fn)` reads the names,
type hints and defaults, so the key list lives in one place, the code that consumes it; so do the typed
settings of the model's parts (`Options.of(settings class)`, zoo.parts; docs/design.md, "Config parts").
Errors are ValueError and name the key, the value and what is allowed; an unknown key suggests the closest
known one.
"""

from __future__ import annotations

import collections.abc
import inspect
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zoo.utils import MISSING, closest


@dataclass(frozen=True)
class Rule:
    """The values one key accepts: `test(value)` says yes or no, `allowed` says which in words.
    `explain(key, value)`, when given, words the error itself (e.g. why the bound is what it is)."""

    test: Callable[[Any], bool]
    allowed: str
    explain: Callable[[str, Any], str | None] | None = None

    def check(self, key: str, value: Any) -> None:
        if not self.test(value):
            explained = self.explain(key, value) if self.explain else None
            raise ValueError(explained or f"{key} must be {self.allowed}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(low: int | None = None, high: int | None = None) -> Rule:
    """An int (not a bool) in [low, high]."""
    bounds = [f">= {low}"] * (low is not None) + [f"<= {high}"] * (high is not None)
    return Rule(lambda v: _is_int(v) and (low is None or v >= low) and (high is None or v <= high),
                "an integer" + (" " + " and ".join(bounds) if bounds else ""))


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False) -> Rule:
    """A finite int or float in the interval; `*_open` excludes that end."""

    def test(v: Any) -> bool:
        if not _is_number(v) or not (isinstance(v, int) or math.isfinite(v)):  # an int is finite, any size
            return False
        above = low is None or (v > low if low_open else v >= low)
        return above and (high is None or (v < high if high_open else v <= high))

    if low is not None and high is not None:
        where = f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        where = f" {'>' if low_open else '>='} {low:g}"
    else:
        where = f" {'<' if high_open else '<='} {high:g}" if high is not None else ""
    return Rule(test, "a finite number" + where)


def one_of(*choices: Any) -> Rule:
    return Rule(lambda v: any(v == c and type(v) is type(c) for c in choices),
                "one of " + ", ".join(repr(c) for c in choices))


def optional(rule: Rule, allowed: str | None = None) -> Rule:
    """`rule` or null; `allowed` words it (default 'null or ...')."""
    return Rule(lambda v: v is None or rule.test(v), allowed or f"null or {rule.allowed}", rule.explain)


def within(base: Rule, test: Callable[[Any], bool], bound: str | Callable[[str, Any], str]) -> Rule:
    """A value `base` allows that also passes `test`; the error says `base`'s words when the type is wrong
    and '{key} must be {bound}' (or `bound(key, value)`) when only the bound is ('model.dropout must be in
    [0, 1)')."""

    def explain(key: str, value: Any) -> str:
        if not base.test(value):
            return f"{key} must be {base.allowed}, got {value!r}"
        return bound(key, value) if callable(bound) else f"{key} must be {bound}, got {value!r}"

    return Rule(lambda v: base.test(v) and test(v), base.allowed, explain)


def positive_scale() -> Rule:
    """A multiplier > 0, or null for the component's default (attn_scale, final_softcap, ...)."""
    return optional(within(number(), lambda v: v > 0, "> 0 (or null for the default)"))


def list_of(rule: Rule, length: int | None = None) -> Rule:
    size = f" of {length}" if length is not None else ""
    return Rule(lambda v: isinstance(v, (list, tuple)) and (length is None or len(v) == length)
                and all(rule.test(x) for x in v), f"a list{size}, each {rule.allowed}")


def any_of(*rules: Rule) -> Rule:
    return Rule(lambda v: any(r.test(v) for r in rules), " or ".join(r.allowed for r in rules))


TEXT = Rule(lambda v: isinstance(v, str), "a string")
BOOL = Rule(lambda v: isinstance(v, bool), "true or false")
MAPPING = Rule(lambda v: isinstance(v, Mapping), "a mapping")
ANY = Rule(lambda v: True, "anything")
NAME = Rule(lambda v: isinstance(v, str) and bool(v), "a name (a string)")  # of a registry entry
POSITIVE = Rule(lambda v: _is_int(v) and v >= 1, "a positive integer")
COUNT = Rule(lambda v: _is_int(v) and v >= 0, "a non-negative integer")
SWITCH = Rule(lambda v: v is None or isinstance(v, bool), "true or false (or null for the default)")


def hint_rule(hint: Any) -> Rule:
    """The Rule for a type hint: int, float, str, bool, None, unions, Literal, lists, dicts, classes;
    `Annotated[int, rule]` takes the Rule it carries (a parameter states its own bounds)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return next((m for m in hint.__metadata__ if isinstance(m, Rule)), None) or hint_rule(args[0])
    if origin in (typing.Union, types.UnionType):
        if int in args and float in args:  # "an integer or a finite number" says the same twice
            args = tuple(a for a in args if a is not int)
        rules = [hint_rule(a) for a in args if a is not type(None)]
        rule = rules[0] if len(rules) == 1 else any_of(*rules)
        return optional(rule) if type(None) in args else rule
    if origin is typing.Literal:
        return one_of(*args)
    if origin is tuple and args and args[-1] is not Ellipsis:  # fixed length; zoo's tuples are homogeneous
        return list_of(hint_rule(args[0]), length=len(args))
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable):
        return list_of(hint_rule(args[0]) if args else ANY)
    if origin in (dict, collections.abc.Mapping):
        return MAPPING
    return _SIMPLE.get(hint) or (Rule(lambda v: isinstance(v, hint), hint.__name__)
                                 if isinstance(hint, type) else ANY)


_SIMPLE: dict[Any, Rule] = {int: integer(), float: number(), str: TEXT, bool: BOOL, Any: ANY,
                            type(None): Rule(lambda v: v is None, "null")}


def unknown_key_message(group: str, key: str, allowed: Iterable[str], where: str = "") -> str:
    """'Unknown key 'optim.lrr'. Did you mean 'optim.lr'? Allowed optim keys: ...' (the path as typed)."""
    allowed = sorted(allowed)
    path = _path(group, key)
    match = closest(key, allowed)
    hint = f" Did you mean {_path(group, match)!r}?" if match is not None else ""
    context = f" ({where})" if where else ""
    return f"Unknown key {path!r}{context}.{hint} Allowed {group or 'top-level'} keys: {', '.join(allowed)}."


def _path(group: str, key: str) -> str:
    return f"{group}.{key}" if group else key


@dataclass(frozen=True)
class Options:
    """The keys one config group accepts, a Rule for each, and which of them must be set."""

    rules: Mapping[str, Rule]
    required: frozenset[str] = field(default_factory=frozenset)
    defaults: Mapping[str, Any] = field(default_factory=dict)  # key -> value when not given (`filled`)

    @classmethod
    def of(cls, fn: Callable[..., Any], skip: Iterable[str] = ()) -> Options:
        """The keyword parameters of `fn` (minus `skip`, `self`, *args/**kwargs), typed by their hints."""
        params = [p for p in _parameters(fn) if p.name not in {"self", *skip}]
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except (NameError, TypeError):  # a hint that does not resolve: check names only
            hints = {}
        rules = {p.name: hint_rule(hints[p.name]) if p.name in hints else ANY for p in params}
        required = frozenset(p.name for p in params if p.default is p.empty)
        return cls(rules, required, {p.name: p.default for p in params if p.default is not p.empty})

    def extended(self, rules: Mapping[str, Rule] | Options, required: Iterable[str] = ()) -> Options:
        """These options with `rules` added (a key given in both takes the rule from `rules`); an Options
        brings its required keys and defaults too."""
        if isinstance(rules, Options):
            required = rules.required | frozenset(required)
            return Options({**self.rules, **rules.rules}, self.required | required,
                           {**self.defaults, **rules.defaults})
        return Options({**self.rules, **rules}, self.required | frozenset(required), self.defaults)

    def defaulting(self, **defaults: Any) -> Options:
        """These options with other defaults for some keys (a callback's decoding keys default otherwise
        than `generate()`'s)."""
        unknown = set(defaults) - set(self.rules)
        if unknown:
            raise ValueError(f"defaults for undeclared keys: {', '.join(sorted(unknown))}")
        return Options(self.rules, self.required, {**self.defaults, **defaults})

    def only(self, *keys: str) -> Options:
        """These options restricted to `keys` (a group taking some of another group's keys, same rules)."""
        return Options({k: self.rules[k] for k in keys}, self.required & frozenset(keys),
                       {k: v for k, v in self.defaults.items() if k in keys})

    def filled(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """`given` with the default of every key it leaves out."""
        return {**self.defaults, **given}

    def check(self, group: str, given: Mapping[str, Any], where: str = "") -> None:
        """Raise ValueError for the first unknown key, missing required key or disallowed value."""
        for key in given:
            if key not in self.rules:
                raise ValueError(unknown_key_message(group, key, self.rules, where))
        for key in sorted(self.required):
            if given.get(key) in (None, MISSING):
                raise ValueError(f"{where or group or 'the config'} needs {_path(group, key)}")
        for key, value in given.items():
            if value == MISSING:
                raise ValueError(f"{_path(group, key)} is required (set {_path(group, key)}=...)")
            self.rules[key].check(_path(group, key), value)


def declared(**keys: tuple[Rule, Any]) -> Options:
    """Options from `key=(rule, default)` pairs: each key's rule and default written once, together."""
    return Options({key: rule for key, (rule, _) in keys.items()},
                   defaults={key: default for key, (_, default) in keys.items()})


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in inspect.signature(fn).parameters.values() if p.kind in kinds]


def check_entry(group: str, name: str, given: Mapping[str, Any], options_of: Callable[[str], Options],
                names: Iterable[str]) -> None:
    """Check `given` against the options of entry `name` of a registry (`logger=csv`, `scheduler=cosine`).
    A key that another entry has was most likely left behind by `group.name=...`: say to switch with the
    config group instead, which replaces the whole group."""
    options = options_of(name)
    where = f"{group}={name}"
    unknown = [key for key in given if key not in options.rules]
    if unknown and any(unknown[0] in options_of(other).rules for other in names if other != name):
        raise ValueError(unknown_key_message(group, unknown[0], options.rules, where)
                         + f" Switch with the config group, e.g. {group}={name}, not {group}.name={name}.")
    options.check(group, given, where)
