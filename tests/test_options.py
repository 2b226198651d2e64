"""zoo.options: rules from type hints, keyword parameters as a group's keys, one message per bad key/value."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest

from zoo.options import (
    Options,
    check_entry,
    hint_rule,
    integer,
    number,
    unknown_key_message,
    within,
)


@pytest.mark.parametrize(
    ("hint", "good", "bad"),
    [
        (int, [0, -3], [True, 1.5, "1"]),
        (float, [1, 0.5], [True, "0.5", float("nan"), float("inf")]),
        (str, ["a"], [1, None]),
        (bool, [True], [1, "true"]),
        (int | None, [None, 2], ["x"]),
        (Literal["a", "b"], ["a"], ["c", 1]),
        (list[str], [["a"], []], ["a", [1]]),
        (tuple[float, float], [[0.9, 0.95]], [[0.9], [0.9, "x"]]),
        (str | list[str], ["a", ["a", "b"]], [3]),
    ],
)
def test_hint_rules(hint, good, bad):
    rule = hint_rule(hint)
    assert all(rule.test(v) for v in good) and not any(rule.test(v) for v in bad)


def test_bounds_are_said_in_the_message():
    with pytest.raises(ValueError, match=r"^x must be an integer >= 1, got 0$"):
        integer(1).check("x", 0)
    with pytest.raises(ValueError, match=r"^p must be a finite number in \(0, 1\], got 0$"):
        number(0, 1, low_open=True).check("p", 0)


def _source(*, path: str, rate: float = 0.1, seed: int = 0) -> None:
    """A registry entry whose keyword parameters are its options."""


def test_options_of_reads_names_hints_and_required_keys():
    options = Options.of(_source, skip=("seed",))
    assert set(options.rules) == {"path", "rate"} and options.required == {"path"}
    options.check("data", {"path": "a", "rate": 0.5})
    with pytest.raises(ValueError, match=r"^data=src needs data.path$"):
        options.check("data", {"rate": 0.5}, "data=src")
    with pytest.raises(ValueError, match=r"^data.seed is required \(set data.seed=...\)$"):
        Options.of(_source).check("data", {"path": "a", "rate": 0.5, "seed": "???"})
    with pytest.raises(ValueError, match=r"^data.rate must be a finite number, got 'x'$"):
        options.check("data", {"path": "a", "rate": "x"})


def test_unknown_key_names_the_path_a_close_match_and_every_key():
    assert unknown_key_message("optim", "lrr", ["lr", "eps"]) == (
        "Unknown key 'optim.lrr'. Did you mean 'optim.lr'? Allowed optim keys: eps, lr.")
    assert unknown_key_message("", "zzz", ["seed"], "") == "Unknown key 'zzz'. Allowed top-level keys: seed."


def test_a_key_of_another_entry_says_to_switch_with_the_group():
    entries = {"a": Options.of(lambda *, x=1: None), "b": Options.of(lambda *, y=1: None)}
    with pytest.raises(ValueError,
                       match=r"\(g=a\)\. .* Switch with the config group, e.g. g=a, not g.name=a\.$"):
        check_entry("g", "a", {"y": 1}, entries.__getitem__, entries)
    with pytest.raises(ValueError) as err:
        check_entry("g", "a", {"z": 1}, entries.__getitem__, entries)
    assert "Switch" not in str(err.value)


def _experts(*, n_experts: Annotated[int, integer(1)] = 8, top_k: int = 2) -> None:
    """An entry whose keys are its keyword parameters."""


def test_options_of_a_signature_check_key_by_key_and_fill_the_defaults():
    inner = Options.of(_experts)
    inner.check("g", {"top_k": 1})
    with pytest.raises(ValueError, match=r"^Unknown key 'g.topk'. Did you mean 'g.top_k'\?"):
        inner.check("g", {"topk": 1})
    with pytest.raises(ValueError, match=r"^g.n_experts must be an integer >= 1, got 0$"):
        inner.check("g", {"n_experts": 0})
    assert inner.filled({"top_k": 1}) == {"n_experts": 8, "top_k": 1}


def test_within_names_the_type_then_the_bound():
    rule = within(number(), lambda v: 0 <= v < 1, "in [0, 1)")
    with pytest.raises(ValueError, match=r"^p must be a finite number, got 'a'$"):
        rule.check("p", "a")
    with pytest.raises(ValueError, match=r"^p must be in \[0, 1\), got 1.5$"):
        rule.check("p", 1.5)
    rule.check("p", 0.5)
