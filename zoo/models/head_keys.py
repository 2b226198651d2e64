"""The config keys heads own, and their rule: from a base a key the chosen head does not read is reset to its
default, given explicitly it is an error naming it and the heads that read it (`zoo.owned_keys.Vocabulary`).
Each head declares its keys as `options` (zoo.modules.heads)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from zoo.config import ModelConfig
from zoo.modules.heads import HEADS
from zoo.owned_keys import Vocabulary

_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ModelConfig)}


def head_vocabulary() -> Vocabulary:
    """The keys each head reads (zoo.models.vocabulary.settle_keys applies the same rule to every owner)."""
    return Vocabulary({"head": {name: HEADS.get(name).options for name in HEADS}}, _DEFAULTS)


def head_owned_keys() -> frozenset[str]:
    """Every config key some head reads."""
    return frozenset(head_vocabulary().owners())


def foreign_keys(head: str) -> frozenset[str]:
    """Keys that other heads read and head `head` does not: under `head` they mean nothing."""
    return head_owned_keys() - frozenset(HEADS.get(head).reads)


def settle_head_keys(base: Mapping[str, Any],
                     explicit: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The head-owned keys alone under the rule of `zoo.owned_keys.Vocabulary.settle`: from `base` a key the
    chosen head does not read is reset to its default, given in `explicit` it is a ValueError naming it, the
    head and the heads that read it. Returns (merged, reset)."""
    return head_vocabulary().settle(base, explicit)


def without_foreign_keys(cfg: ModelConfig) -> ModelConfig:
    """`cfg` with every key its head does not read at its default (a config saved before the rule held)."""
    merged, _ = settle_head_keys(cfg.to_dict(), {})
    return ModelConfig.from_dict(merged)
