"""Small helpers shared across zoo: the ignored-label id, the did-you-mean hint, a few names of many,
config-to-dict and eval mode for a block of code. Each lives here once so errors read the same everywhere."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

IGNORE_INDEX = -100  # label id that losses and metrics skip (PyTorch's cross_entropy default)
MISSING = "???"  # OmegaConf's mandatory value, still a plain string after to_container


def closest(value: object, allowed: Iterable[str]) -> str | None:
    """The allowed name most like `value` (difflib's ratio >= 0.6), or None."""
    close = difflib.get_close_matches(str(value), list(allowed), n=1)
    return close[0] if close else None


def did_you_mean(value: object, allowed: Iterable[str]) -> str:
    """" Did you mean 'x'?" for the closest allowed name, or "" when none is close."""
    match = closest(value, allowed)
    return f" Did you mean {match!r}?" if match is not None else ""


def some(names: Sequence[str], limit: int) -> str:
    """The first `limit` names and how many more, "a, b and 3 more": an error names a few, counts the rest."""
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def plain_dict(data: Any, what: str, *, expected: str = "a mapping") -> dict[str, Any]:
    """An OmegaConf DictConfig (resolved), a dataclass instance or a mapping as a plain dict.

    A missing (``???``) value raises ValueError naming ``what.key``; anything that is not a mapping
    raises TypeError "``what`` config must be ``expected``, got <type>"."""
    try:  # OmegaConf nodes (Hydra) become plain containers
        from omegaconf import DictConfig, OmegaConf

        if isinstance(data, DictConfig):
            _raise_missing(what, sorted(OmegaConf.missing_keys(data)))
            data = OmegaConf.to_container(data, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with hydra-core
        pass
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = dataclasses.asdict(data)
    if not isinstance(data, Mapping):
        raise TypeError(f"{what} config must be {expected}, got {type(data).__name__}.")
    _raise_missing(what, sorted(str(k) for k, v in data.items() if isinstance(v, str) and v == MISSING))
    return dict(data)


def _raise_missing(what: str, missing: list[str]) -> None:
    if missing:
        raise ValueError(f"{what}.{missing[0]} is required (missing: {missing})")


def eval_mode(model: Any) -> contextlib.AbstractContextManager[Any]:
    """`with eval_mode(model):` runs the block with dropout off and puts every submodule back in its
    previous mode afterwards, also when the block raises."""
    return module_mode(model, training=False)


@contextlib.contextmanager
def module_mode(model: Any, *, training: bool) -> Iterator[Any]:
    """`model.train(training)` for the block; every submodule's previous mode is restored on exit."""
    before = [(module, module.training) for module in model.modules()]
    model.train(training)
    try:
        yield model
    finally:
        for module, was_training in before:
            module.training = was_training


def check_range(values: Any, limit: int, message: Callable[[int, int], str]) -> None:
    """Raise ValueError(message(min, max)) unless every value of the integer tensor is in [0, limit): one host
    sync, and a clear error instead of an IndexError on CPU or a device-side assert on GPU."""
    low, high = values.aminmax()
    if low < 0 or high >= limit:
        raise ValueError(message(int(low), int(high)))
