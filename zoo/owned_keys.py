"""Flat config keys owned by registry entries (`model.moe` belongs to ffn=moe, `model.moe.aux_coef` to
balance=aux): which keys the chosen entries read, and the one rule for a key none of them reads: reset when it
came with a preset or a saved config, refused naming its readers when the user gave it (`Vocabulary.settle`;
docs/design.md, "Config parts"). The parts with typed settings (zoo.parts) need none of this; what is left
here goes once the FFN is a part too. The rules for single values are zoo.options'."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from zoo.options import Options, Rule


@dataclass(frozen=True)
class Vocabulary:
    """Config keys owned by registry entries. `groups`: the key that names an entry (`positional`; a list of
    names chooses several, `model.moe.balance: [aux, z]`) -> entry name -> the Options that entry reads, in
    the order one choice opens the next (rope reads rope_scaling); `defaults`: every key's default. A key no
    entry declares is read always; an entry's key only while that entry is chosen, and otherwise must hold
    its default. `sparse`: the values hold only the keys given (a nested mapping such as `model.moe`), so a
    key present counts as set and settling one removes it."""

    groups: Mapping[str, Mapping[str, Options]]
    defaults: Mapping[str, Any]
    sparse: bool = False

    def owners(self) -> dict[str, tuple[str, Rule]]:
        """Owned key -> (its group, its rule); entries reading one key share the first declaration's rule."""
        owned: dict[str, tuple[str, Rule]] = {}
        for group, entries in self.groups.items():
            for options in entries.values():
                for key, rule in options.rules.items():
                    owned.setdefault(key, (group, rule))
        return owned

    def _chosen(self, values: Mapping[str, Any], group: str) -> list[Any]:
        chosen = values.get(group, self.defaults.get(group))
        return list(chosen) if isinstance(chosen, (list, tuple)) else [chosen]

    def read_keys(self, values: Mapping[str, Any]) -> set[str]:
        """The keys the choices in `values` read (an unknown name reads nothing; its check names it)."""
        read = set(self.defaults) - set(self.owners())
        for group, entries in self.groups.items():
            if group in read and self._known(values, group):
                read |= {key for name in self._chosen(values, group) for key in entries[name].rules}
        return read

    def _known(self, values: Mapping[str, Any], group: str) -> bool:
        """Whether `values` names registered entries of `group`."""
        return all(isinstance(c, str) and c in self.groups[group] for c in self._chosen(values, group))

    def unread(self, values: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(key, group) of each owned key set (away from its default) that no chosen entry reads."""
        read = self.read_keys(values)
        unknown = {g for g in self.groups if g in read and not self._known(values, g)}  # named by its check
        return [(key, group) for key, (group, _) in self.owners().items()
                if key not in read and group not in unknown and key in values
                and (self.sparse or values[key] != self.defaults[key])]

    def readers(self, key: str) -> str:
        """The entries that read owned `key`: 'linear|llama3|yarn'."""
        entries = self.groups[self.owners()[key][0]]
        return "|".join(n for n in sorted(entries) if key in entries[n].rules)

    def _says(self, group: str, key: str, values: Mapping[str, Any]) -> tuple[str, str, str]:
        chosen = self._chosen(values, group)
        shown = str(chosen[0]) if len(chosen) == 1 else f"[{', '.join(map(str, chosen))}]"
        readers = self.readers(key)
        reads = ({k for name in chosen for k in self.groups[group][name].rules}
                 if self._known(values, group) else set())
        return readers, shown, ", ".join(sorted(reads)) or "no key of its own"

    def check_read(self, values: Mapping[str, Any], prefix: str = "model.",
                   ignored: Iterable[str] = ()) -> None:
        """ValueError for the first key set for an entry that is not chosen (it would have no effect); the
        keys of `ignored` groups are let through (they are settled where a config is assembled)."""
        for key, group in [(k, g) for k, g in self.unread(values) if g not in ignored][:1]:
            readers, chosen, _ = self._says(group, key, values)
            raise ValueError(f"{prefix}{key}={values[key]!r} has no effect with {prefix}{group}={chosen!r}: "
                             f"only {prefix}{group}={readers} reads it; remove it or choose one of those.")

    def nested(self) -> dict[str, Vocabulary]:
        """Owned keys holding a mapping whose inner keys have a vocabulary of their own (`model.moe`)."""
        return {key: rule.vocabulary() for key, (_, rule) in self.owners().items()
                if rule.vocabulary is not None}

    def settle(self, base: Mapping[str, Any], explicit: Mapping[str, Any],
               prefix: str = "model.") -> tuple[dict[str, Any], list[str]]:
        """The one rule for entry-owned keys: `base` is where a config comes from (a preset, a saved or
        pretrained config, a mapping given whole), `explicit` what the user laid over it (keyword overrides,
        `model.x=` on the command line). A key no chosen entry reads is reset to its default when it comes
        from `base` (returned in the list) and is a ValueError naming it and the entries that read it when it
        is explicit. An explicit mapping replaces the base's; an explicit `key.inner` (`moe.balance`, from
        `model.moe.balance=none`) sets one key inside it. The rule holds per inner key of a `nested` mapping
        with a vocabulary (`model.moe.aux_coef` under balance=none). Returns (merged, reset keys)."""
        whole = {k: v for k, v in explicit.items() if "." not in k}
        inner: dict[str, dict[str, Any]] = {}  # key -> the inner keys given one by one
        for path, value in explicit.items():
            if "." in path:
                key, sub = path.split(".", 1)
                inner.setdefault(key, {})[sub] = value
        merged = {**base, **whole}
        for key, values in inner.items():
            held = merged.get(key)
            merged[key] = {**(held if isinstance(held, Mapping) else {}), **values}
        reset = []
        for key, group in self.unread(merged):
            if key in self.groups and not self._known(merged, key):
                continue  # a misspelled name: its own check names it
            if key in whole or key in inner:
                readers, chosen, reads = self._says(group, key, merged)
                raise ValueError(f"{prefix}{key}={merged[key]!r} is read by {prefix}{group}={readers}, not "
                                 f"by {prefix}{group}={chosen}; drop it ({prefix}{group}={chosen} reads: "
                                 f"{reads})")
            if self.sparse:
                del merged[key]
            else:
                merged[key] = self.defaults[key]
            reset.append(key)
        for key, vocabulary in self.nested().items():
            if key in reset or not isinstance(merged.get(key), Mapping):
                continue
            given = whole[key] if isinstance(whole.get(key), Mapping) else {}
            merged[key], more = vocabulary.settle(merged[key], {**given, **inner.get(key, {})},
                                                  f"{prefix}{key}.")
            reset += [f"{key}.{k}" for k in more]
        return merged, sorted(reset)
