"""Group-relative policy optimisation losses (GRPO and its family), one registry entry each, under
`grpo.loss_type`: `grpo` (each completion's token mean, then the mean over completions), `dapo` (one mean over
every completion token of the generation batch: no length bias; trl's default), `dr_grpo` (the sum over tokens
divided by completions x max_completion_length). All share trl's per-token term: the PPO-clipped importance
ratio pi/pi_old (clipped to [1 - epsilon, 1 + epsilon_high]) times the completion's advantage, plus beta times
the k3 estimate of KL(pi || reference). Advantages are group-relative: each completion's reward minus its
group's mean, optionally divided by the group's std (`group_advantages`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F

from zoo.options import NAME, integer, number, optional
from zoo.registry import Registry

STD_EPS = 1e-4  # added to the std before dividing (trl's value): a group whose rewards all agree gets 0


@dataclass(frozen=True)
class Rollouts:
    """B completions, T completion positions (right-padded; `mask` 1 on completion tokens): the policy's
    per-token log-probs (with gradients), those of the policy that sampled them (`old_logps`; None: this is
    the first optimisation step on them, so the policy is that one: `logps` detached), the reference's (None:
    no KL term), one advantage per completion, and `tokens`: the completion tokens of the whole generation
    batch the dapo mean is over (None: this batch's)."""

    logps: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T)
    advantages: torch.Tensor  # (B,)
    old_logps: torch.Tensor | None = None  # (B, T)
    ref_logps: torch.Tensor | None = None  # (B, T)
    tokens: torch.Tensor | float | None = None

    @property
    def ratio(self) -> torch.Tensor:
        """pi / pi_old per token (B, T): exactly 1 (with pi's gradient) on the first step."""
        old = self.logps.detach() if self.old_logps is None else self.old_logps
        return torch.exp(self.logps - old)

    def kl(self) -> torch.Tensor:
        """The k3 estimator of KL(pi || ref) per token (B, T): exp(ref - pi) - (ref - pi) - 1 (trl's)."""
        if self.ref_logps is None:
            raise ValueError("grpo.beta > 0 needs the reference's log-probs; none were computed")
        delta = self.ref_logps - self.logps
        return torch.exp(delta) - delta - 1


@dataclass(frozen=True)
class LossSettings:
    """The `grpo.*` keys the loss reads (the task's settings hold these and more)."""

    loss_type: Annotated[str, NAME] = "dapo"  # GRPO_LOSSES
    epsilon: Annotated[float, number(0, 1, low_open=True, high_open=True)] = 0.2  # the ratio's lower clip
    # the ratio's upper clip: None is epsilon (DAPO's clip-higher: 0.28)
    epsilon_high: Annotated[float | None, optional(number(0, low_open=True))] = None
    beta: Annotated[float, number(0)] = 0.0  # weight of the KL to the reference (0: no reference is scored)
    max_completion_length: Annotated[int, integer(1)] = 256  # dr_grpo's constant normaliser; the rollout cap
    # the KL term times the (differentiable) ratio: the unbiased reverse-KL gradient off-policy
    # (DeepSeek-V3.2; trl's default)
    use_bias_correction_kl: bool = True

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


class GRPOLoss:
    """One loss type: `reduce(per_token, r, s)` -> the scalar loss of the (B, T) per-token losses."""

    def reduce(self, per_token: torch.Tensor, r: Rollouts, s: LossSettings) -> torch.Tensor:
        raise NotImplementedError

    def counted(self, mask: torch.Tensor) -> torch.Tensor:
        """What the loss is a mean over in a (B, T) completion mask: completions (grpo, dr_grpo: a mean per
        completion), or tokens (dapo). Processes weigh their losses by it to give one process's loss."""
        return torch.tensor(mask.shape[0], device=mask.device)


GRPO_LOSSES: Registry[GRPOLoss] = Registry("GRPO loss", key="grpo.loss_type")


def register_loss(name: str):
    """Class decorator: one instance of the class registered in GRPO_LOSSES under `name`."""
    def add(cls: type[GRPOLoss]) -> type[GRPOLoss]:
        GRPO_LOSSES.register(name, cls())
        return cls
    return add


@register_loss("grpo")
class SequenceMean(GRPOLoss):
    """GRPO (Shao et al. 2024): each completion's mean over its tokens, then the mean over completions (a
    long completion's tokens weigh less)."""

    def reduce(self, per_token: torch.Tensor, r: Rollouts, s: LossSettings) -> torch.Tensor:
        return ((per_token * r.mask).sum(-1) / r.mask.sum(-1).clamp(min=1)).mean()


@register_loss("dapo")
class TokenMean(GRPOLoss):
    """DAPO (Yu et al. 2025): one mean over every completion token of the generation batch."""

    def reduce(self, per_token: torch.Tensor, r: Rollouts, s: LossSettings) -> torch.Tensor:
        tokens = r.mask.sum() if r.tokens is None else r.tokens
        return (per_token * r.mask).sum() / torch.as_tensor(tokens).to(per_token).clamp(min=1)

    def counted(self, mask: torch.Tensor) -> torch.Tensor:
        return mask.sum()


@register_loss("dr_grpo")
class ConstantNormaliser(GRPOLoss):
    """Dr. GRPO (Liu et al. 2025): the sum over tokens over completions x max_completion_length, a
    constant: neither length nor std biases the update."""

    def reduce(self, per_token: torch.Tensor, r: Rollouts, s: LossSettings) -> torch.Tensor:
        return (per_token * r.mask).sum() / (per_token.shape[0] * s.max_completion_length)


def per_token_loss(r: Rollouts, s: LossSettings) -> torch.Tensor:
    """(B, T): -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A) + beta * KL (times the ratio
    with use_bias_correction_kl)."""
    ratio, advantages = r.ratio, r.advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - s.epsilon, 1 + s.clip_high)
    loss = -torch.min(ratio * advantages, clipped * advantages)
    return loss + s.beta * kl_term(r, s) if s.beta else loss


def kl_term(r: Rollouts, s: LossSettings) -> torch.Tensor:
    """(B, T) the k3 KL per token, times the ratio pi/pi_old with use_bias_correction_kl."""
    return r.kl() * r.ratio if s.use_bias_correction_kl else r.kl()


def grpo_loss(r: Rollouts, s: LossSettings) -> torch.Tensor:
    """The batch's loss under `s.loss_type`."""
    return GRPO_LOSSES.get(s.loss_type).reduce(per_token_loss(r, s), r, s)


def loss_metrics(r: Rollouts, s: LossSettings) -> dict[str, torch.Tensor]:
    """What trl logs of a loss step, under its names: the share of completion tokens whose ratio was clipped
    below (with a negative advantage), above (positive), either; the mean KL when beta > 0."""
    ratio, advantages, mask = r.ratio.detach(), r.advantages.unsqueeze(1), r.mask
    low = (ratio < 1 - s.epsilon) & (advantages < 0)
    high = (ratio > 1 + s.clip_high) & (advantages > 0)
    tokens = mask.sum().clamp(min=1)
    out = {"clip_ratio/low_mean": (low * mask).sum() / tokens,
           "clip_ratio/high_mean": (high * mask).sum() / tokens,
           "clip_ratio/region_mean": ((low | high) * mask).sum() / tokens}
    if s.beta:
        out["kl"] = (kl_term(r, s).detach() * mask).sum() / tokens
    return out


def group_advantages(rewards: torch.Tensor, num_generations: int, scale: str = "group") -> torch.Tensor:
    """(N,) advantages of N = prompts x num_generations rewards, each prompt's group consecutive: the reward
    minus its group's mean, divided (scale=group) by the group's std (Bessel-corrected) + 1e-4, or (batch)
    by the whole batch's, or (none) not at all."""
    if rewards.dim() != 1 or rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of num_generations="
                         f"{num_generations}")
    grouped = rewards.view(-1, num_generations)  # (prompts, G)
    centred = (grouped - grouped.mean(1, keepdim=True)).reshape(-1)
    if scale == "none":
        return centred
    if (scale == "group" and num_generations < 2) or rewards.numel() < 2:
        raise ValueError(f"grpo.scale_rewards={scale} divides by the std of a group, which one completion "
                         f"does not have (grpo.num_generations={num_generations}): give num_generations >= 2 "
                         "or grpo.scale_rewards=none")
    std = grouped.std(1, keepdim=True).expand_as(grouped).reshape(-1) if scale == "group" else rewards.std()
    return centred / (std + STD_EPS)


SCALES = ("group", "batch", "none")  # grpo.scale_rewards (trl's values)


def token_logps(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(B, T) log-probs of `targets` (B, T) under `logits` (B, T, V) divided by the sampling temperature
    (trl scores the completions at the temperature they were drawn with), in float32."""
    logps = F.log_softmax(logits.float() / temperature, dim=-1)
    return torch.gather(logps, 2, targets.unsqueeze(-1)).squeeze(-1)


def entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(B, T) entropy of each position's next-token distribution at `temperature` (trl's `entropy` metric)."""
    logps = F.log_softmax(logits.float() / temperature, dim=-1)
    return -(logps.exp() * logps).sum(-1)


def settings_from(given: Mapping) -> LossSettings:
    """A LossSettings of the keys of `given` it declares (the task's grpo settings, already checked)."""
    keys = LossSettings.__dataclass_fields__
    return LossSettings(**{k: v for k, v in dict(given).items() if k in keys})
