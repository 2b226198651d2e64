"""The `grpo.*` settings of task=grpo: the loss's (zoo.tasks.grpo_losses.LossSettings), the rollouts' and the
rewards', checked before any work starts (one ValueError naming the key)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from zoo.options import MAPPING, NAME, TEXT, Options, Rule, any_of, integer, list_of, number, one_of, optional
from zoo.tasks.grpo_losses import GRPO_LOSSES, SCALES, LossSettings
from zoo.tasks.grpo_rollouts import ROLLOUTS
from zoo.tasks.rewards import build_rewards

STOP_TEXT = Rule(lambda v: isinstance(v, str) and bool(v), "non-empty text")


@dataclass(frozen=True)
class GRPOSettings(LossSettings):
    """The `grpo.*` keys: the loss's (LossSettings), the rollouts' and the rewards'."""

    # each a registered name, {name: ..., its keys}, or 'module:function' (zoo.tasks.rewards)
    rewards: Annotated[tuple, list_of(any_of(TEXT, MAPPING))] = ()
    reward_weights: Annotated[tuple | None, optional(list_of(number()))] = None  # one per reward (default 1)
    num_generations: Annotated[int, integer(1)] = 8  # completions sampled per prompt (a group)
    num_iterations: Annotated[int, integer(1)] = 1  # optimisation steps on each generation batch
    scale_rewards: Annotated[str, one_of(*SCALES)] = "group"  # advantages / the group's (batch's) std
    temperature: Annotated[float, number(0, low_open=True)] = 1.0  # sampling (and scoring) temperature
    top_p: Annotated[float, number(0, 1, low_open=True)] = 1.0
    top_k: Annotated[int, integer(0)] = 0  # 0: off
    # a completion also ends once its text contains one of these (kept through the token that completes it)
    stop_strings: Annotated[tuple | None, optional(list_of(STOP_TEXT))] = None
    rollout: Annotated[str, NAME] = "generate"  # the sampler of the completions (ROLLOUTS: generate | engine)


def grpo_settings(given: Mapping[str, Any]) -> GRPOSettings:
    """The `grpo` group checked (known keys, allowed values, a known loss type and rollout sampler, a std to
    divide by, rewards that build): one ValueError naming the key."""
    options = Options.of(GRPOSettings)
    options.check("grpo", given)
    filled = options.filled(given)
    for key in ("rewards", "reward_weights", "stop_strings"):
        if filled[key] is not None:
            filled[key] = tuple(filled[key])
    settings = GRPOSettings(**filled)
    GRPO_LOSSES.get(settings.loss_type)
    ROLLOUTS.get(settings.rollout)
    if settings.scale_rewards == "group" and settings.num_generations < 2:
        raise ValueError("grpo.num_generations=1 with grpo.scale_rewards=group: a group of one completion "
                         "has no std to divide by (and no baseline but itself: every advantage is 0); give "
                         "grpo.num_generations >= 2")
    if settings.rewards:
        build_rewards(settings.rewards, settings.reward_weights)
    return settings
