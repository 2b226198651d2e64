"""Reward functions for task=grpo, a registry under `grpo.rewards`: each entry a name or a mapping naming
it with its keys (`{name: answer_match, extract: boxed}`), or a user's `module:function`. Every reward is
called as trl calls one: `fn(prompts=..., completions=..., completion_ids=..., **fields)`, each field a
list of the data rows' values (one per completion), and returns one float per completion. `score` checks
what comes back: a reward that raises, returns the wrong number of values, or a NaN / non-number is one
error naming the reward and the row."""

from __future__ import annotations

import functools
import importlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import torch

from zoo.options import Options, integer, one_of
from zoo.registry import Registry

RewardFn = Callable[..., Sequence[float]]
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Reward:
    """One reward as a run uses it: the name it is logged under (rewards/<name>/mean), the function, its
    weight in the summed reward, and the row fields it reads (checked when the data is read)."""

    name: str
    fn: RewardFn
    weight: float = 1.0
    fields: tuple[str, ...] = ()


REWARDS: Registry[Callable[..., Reward]] = Registry("reward", key="grpo.rewards")


def text_of(completion: Any) -> str:
    """A completion's text: the string, or a conversational completion's last message's content."""
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"]) if completion else ""


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def last_number(text: str) -> str | None:
    """The last number written in `text` ('... so 12,345.' -> '12345'), or None."""
    found = NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} in `text` (nested braces kept), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


EXTRACTIONS: dict[str, Callable[[str], str | None]] = {"last_number": last_number, "boxed": boxed}


def same_answer(found: str | None, answer: Any) -> bool:
    """Whether an extracted answer is the reference: equal as numbers when both read as numbers, else equal
    as stripped text."""
    if found is None:
        return False
    a, b = _as_number(found), _as_number(str(answer))
    return a == b if a is not None and b is not None else found.strip() == str(answer).strip()


@REWARDS.register("answer_match")
def answer_match(extract: Annotated[str, one_of(*EXTRACTIONS)] = "last_number", field: str = "answer"
                 ) -> Reward:
    """1.0 where the answer extracted from the completion (its last number, or its last \\boxed{}) is the
    row's `field`, else 0.0."""
    rule = EXTRACTIONS[extract]

    def answer_match(prompts, completions, **fields) -> list[float]:
        answers = fields[field]
        return [float(same_answer(rule(text_of(c)), a)) for c, a in zip(completions, answers, strict=True)]

    return Reward("answer_match", answer_match, fields=(field,))


@REWARDS.register("format")
def format_check(pattern: str) -> Reward:
    """1.0 where the whole completion matches the regular expression `pattern` (`.` matches newlines), else
    0.0."""
    try:
        compiled = re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"grpo.rewards: format.pattern={pattern!r} is no regular expression: {exc}"
                         ) from None

    def format_reward(prompts, completions, **fields) -> list[float]:
        return [float(compiled.fullmatch(text_of(c)) is not None) for c in completions]

    return Reward("format", format_reward)


@REWARDS.register("length_penalty")
def length_penalty(max_tokens: Annotated[int, integer(1)] = 256, cache: Annotated[int, integer(1)] = 64
                   ) -> Reward:
    """DAPO's soft overlong punishment: 0 up to max_tokens - cache completion tokens, then falling linearly to
    -1 at max_tokens, -1 beyond."""
    if cache > max_tokens:
        raise ValueError(f"grpo.rewards: length_penalty.cache={cache} must be <= max_tokens={max_tokens}")
    free = max_tokens - cache

    def length_penalty(prompts, completions, completion_ids, **fields) -> list[float]:
        return [0.0 if len(ids) <= free else max(-1.0, (free - len(ids)) / cache) for ids in completion_ids]

    return Reward("length_penalty", length_penalty)


def user_function(path: str) -> Reward:
    """A user's reward `module:function`, imported now (a missing module or function is one error)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"grpo.rewards: {path!r} is neither a registered reward "
                         f"({', '.join(REWARDS.names())}) nor a 'module:function' path")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"grpo.rewards: cannot import module {module_name!r} of reward {path!r}: {exc}"
                         ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"grpo.rewards: module {module_name!r} has no function {attr!r} (reward {path!r})")
    return Reward(attr, fn)


def build_rewards(entries: Sequence[Any], weights: Sequence[float] | None = None) -> list[Reward]:
    """The `grpo.rewards` list built: each a registered name, a mapping {name: ..., its keys}, or a
    `module:function`; `weights` (grpo.reward_weights) one per reward, default 1 each."""
    if not entries:
        raise ValueError(f"grpo.rewards is empty: name at least one reward ({', '.join(REWARDS.names())}, or "
                         "'module:function')")
    if weights is not None and len(weights) != len(entries):
        raise ValueError(f"grpo.reward_weights has {len(weights)} values for {len(entries)} grpo.rewards: "
                         "give one weight per reward")
    built = []
    for i, entry in enumerate(entries):
        if isinstance(entry, Mapping):
            keys = dict(entry)
            name = keys.pop("name", None)
            if name not in REWARDS:
                raise ValueError(f"grpo.rewards[{i}]: a mapping names a registered reward with name: one of "
                                 f"{', '.join(REWARDS.names())}; got name={name!r}")
        elif isinstance(entry, str):
            name, keys = entry, {}
        else:
            raise ValueError(f"grpo.rewards[{i}] must be a reward name, a mapping or 'module:function', got "
                             f"{entry!r}")
        if name not in REWARDS:
            reward = user_function(name)
        else:
            factory = REWARDS.get(name)
            options = Options.of(factory)
            options.check(f"grpo.rewards.{name}", keys)
            reward = factory(**options.filled(keys))
        weight = 1.0 if weights is None else float(weights[i])
        built.append(Reward(reward.name, reward.fn, weight, reward.fields))
    names = [r.name for r in built]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"grpo.rewards names {', '.join(twice)} more than once: each reward is logged under "
                         "its name (rewards/<name>/mean); combine them in one function of your own")
    return built


def _row(prompts: Sequence[Any], completions: Sequence[Any], i: int) -> str:
    return f"row {i} (prompt {text_of(prompts[i])!r:.80}, completion {text_of(completions[i])!r:.80})"


def score(rewards: Sequence[Reward], prompts: Sequence[Any], completions: Sequence[Any],
          completion_ids: Sequence[Sequence[int]], fields: Mapping[str, Sequence[Any]]) -> torch.Tensor:
    """(N, K) float32: each reward's values for the N completions, called as trl calls reward functions.
    Raises one ValueError naming the reward and the row for an exception, a wrong count, or a value that is
    not a finite number."""
    n = len(completions)
    out = torch.zeros(n, len(rewards))
    for k, reward in enumerate(rewards):
        call = functools.partial(_call, reward.fn, prompts, completions, completion_ids, fields)
        try:
            values = list(call(slice(None)))
        except Exception as exc:
            raise ValueError(f"reward {reward.name} raised {type(exc).__name__}: {exc} on "
                             f"{_row(prompts, completions, _first_raising(call, n))}") from exc
        if len(values) != n:
            raise ValueError(f"reward {reward.name} returned {len(values)} values for {n} completions: a "
                             "reward function returns one float per completion")
        for i, value in enumerate(values):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not ok:
                raise ValueError(f"reward {reward.name} returned {value!r} for "
                                 f"{_row(prompts, completions, i)}: a reward is a finite number")
            out[i, k] = float(value)
    return out


def _call(fn: RewardFn, prompts, completions, completion_ids, fields, rows: slice) -> Sequence[float]:
    """`fn` on `rows` of the completions, with trl's keyword arguments."""
    return fn(prompts=list(prompts[rows]), completions=list(completions[rows]),
              completion_ids=list(completion_ids[rows]), **{key: list(v[rows]) for key, v in fields.items()})


def _first_raising(call: Callable[[slice], Any], n: int) -> int:
    """The first row on which `call` raises alone (0 when none does: the batch as a whole made it raise)."""
    for i in range(n):
        try:
            call(slice(i, i + 1))
        except Exception:
            return i
    return 0


def reward_metrics(per_reward: torch.Tensor, rewards: Sequence[Reward], num_generations: int
                   ) -> dict[str, torch.Tensor]:
    """trl's reward metrics of (N, K) rewards: rewards/<name>/mean and /std per reward, the weighted sum's
    mean (reward) and std (reward_std), and the share of groups whose summed rewards all agree
    (frac_reward_zero_std: no learning signal)."""
    weights = torch.tensor([r.weight for r in rewards], dtype=per_reward.dtype)
    total = (per_reward * weights).sum(1)
    out: dict[str, torch.Tensor] = {}
    for k, reward in enumerate(rewards):
        out[f"rewards/{reward.name}/mean"] = per_reward[:, k].mean()
        out[f"rewards/{reward.name}/std"] = per_reward[:, k].std() if len(total) > 1 else torch.tensor(0.0)
    grouped = total.view(-1, num_generations)
    out["reward"], out["reward_std"] = total.mean(), total.std() if len(total) > 1 else torch.tensor(0.0)
    out["frac_reward_zero_std"] = (grouped.std(1) < 1e-8).float().mean() if num_generations > 1 \
        else torch.tensor(1.0)
    return out


def weighted(per_reward: torch.Tensor, rewards: Sequence[Reward]) -> torch.Tensor:
    """(N,) the rewards summed with their weights."""
    return (per_reward * torch.tensor([r.weight for r in rewards], dtype=per_reward.dtype)).sum(1)
