"""Preference-optimisation losses (DPO and its family), one registry entry each, under `dpo.loss_type`:
`sigmoid` (DPO), `ipo`, `hinge`, `robust` (label-smoothed DPO); `dpo.sft_weight` adds the chosen completions'
per-token NLL (RPO). Each entry maps a batch's summed completion log-probabilities (policy and reference) to
one loss per pair, as trl's DPOTrainer computes them, and declares which `dpo.*` settings it reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import torch
import torch.nn.functional as F

from zoo.options import NAME, Options, number, one_of
from zoo.registry import Registry


@dataclass(frozen=True)
class PairLogps:
    """B preference pairs: summed completion log-probs (B,) under the policy and the reference, and the
    number of completion tokens each sum is over."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    ref_chosen: torch.Tensor
    ref_rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor

    @property
    def chosen_logratios(self) -> torch.Tensor:
        return self.chosen - self.ref_chosen

    @property
    def rejected_logratios(self) -> torch.Tensor:
        return self.rejected - self.ref_rejected

    @property
    def margin(self) -> torch.Tensor:
        """log(pi/ref)(chosen) - log(pi/ref)(rejected), the quantity every loss here is a function of."""
        return self.chosen_logratios - self.rejected_logratios


@dataclass(frozen=True)
class DPOSettings:
    """The `dpo.*` keys: what the preference loss needs."""

    loss_type: Annotated[str, NAME] = "sigmoid"  # DPO_LOSSES
    beta: Annotated[float, number(0, low_open=True)] = 0.1  # strength of the pull toward the reference
    label_smoothing: Annotated[float, number(0, 0.5, high_open=True)] = 0.0  # robust: share of flipped labels
    sft_weight: Annotated[float, number(0)] = 0.0  # RPO: weight of the chosen completions' per-token NLL
    # live: a frozen copy (finetune=lora: the adapters off) scores each batch; precomputed: every pair scored
    # once before training, kept in the checkpoint, no reference model in memory
    reference: Annotated[str, one_of("live", "precomputed")] = "live"


class DPOLoss:
    """One loss type: `per_pair(pairs, settings)` -> (B,) losses; `reads`: the dpo.* keys only it uses."""

    reads: tuple[str, ...] = ()

    def per_pair(self, pairs: PairLogps, s: DPOSettings) -> torch.Tensor:
        raise NotImplementedError


DPO_LOSSES: Registry[DPOLoss] = Registry("DPO loss", key="dpo.loss_type")


def register_loss(name: str):
    """Class decorator: one instance of the class registered in DPO_LOSSES under `name`."""
    def add(cls: type[DPOLoss]) -> type[DPOLoss]:
        DPO_LOSSES.register(name, cls())
        return cls
    return add


@register_loss("sigmoid")
class Sigmoid(DPOLoss):
    """DPO (Rafailov et al. 2023): -log sigmoid(beta * margin)."""

    def per_pair(self, pairs: PairLogps, s: DPOSettings) -> torch.Tensor:
        return -F.logsigmoid(s.beta * pairs.margin)


@register_loss("hinge")
class Hinge(DPOLoss):
    """SLiC's hinge on the reward margin: relu(1 - beta * margin)."""

    def per_pair(self, pairs: PairLogps, s: DPOSettings) -> torch.Tensor:
        return torch.relu(1 - s.beta * pairs.margin)


@register_loss("ipo")
class IPO(DPOLoss):
    """IPO (Azar et al. 2023, eq. 17): (margin per completion token - 1/(2 beta))^2; log-ratios averaged
    over each completion's tokens, as trl does (confirmed by the IPO authors): beta is length-free."""

    def per_pair(self, pairs: PairLogps, s: DPOSettings) -> torch.Tensor:
        chosen = pairs.chosen_logratios / pairs.chosen_tokens.clamp(min=1)
        rejected = pairs.rejected_logratios / pairs.rejected_tokens.clamp(min=1)
        return (chosen - rejected - 1 / (2 * s.beta)) ** 2


@register_loss("robust")
class Robust(DPOLoss):
    """Robust DPO (Chowdhury et al. 2024): unbiased under a share `label_smoothing` of flipped preferences."""

    reads = ("label_smoothing",)

    def per_pair(self, pairs: PairLogps, s: DPOSettings) -> torch.Tensor:
        eps, z = s.label_smoothing, s.beta * pairs.margin
        return (-(1 - eps) * F.logsigmoid(z) + eps * F.logsigmoid(-z)) / (1 - 2 * eps)


def dpo_settings(given: Mapping[str, Any]) -> DPOSettings:
    """The `dpo` group checked: known keys and allowed values, a known loss type, and no key set that only
    another loss type reads. One ValueError naming the key and what is allowed."""
    options = Options.of(DPOSettings)
    options.check("dpo", given)
    settings = DPOSettings(**options.filled(given))
    chosen = DPO_LOSSES.get(settings.loss_type)
    defaults = DPOSettings()
    for name in DPO_LOSSES.names():
        for key in DPO_LOSSES.get(name).reads:
            if key not in chosen.reads and getattr(settings, key) != getattr(defaults, key):
                readers = [n for n in DPO_LOSSES.names() if key in DPO_LOSSES.get(n).reads]
                raise ValueError(f"dpo.{key}={getattr(settings, key)} has no effect with dpo.loss_type="
                                 f"{settings.loss_type}: only dpo.loss_type={'|'.join(readers)} reads it; "
                                 "drop it or change the loss type")
    return settings


def sft_term(pairs: PairLogps) -> torch.Tensor:
    """The chosen completions' mean NLL per token over the batch (RPO's added term; trl's `sft` loss)."""
    return -pairs.chosen.sum() / pairs.chosen_tokens.sum().clamp(min=1)


def dpo_loss(pairs: PairLogps, settings: DPOSettings) -> torch.Tensor:
    """The batch's loss: the mean over pairs of the chosen loss type, plus sft_weight times the SFT term."""
    loss = DPO_LOSSES.get(settings.loss_type).per_pair(pairs, settings).mean()
    return loss + settings.sft_weight * sft_term(pairs) if settings.sft_weight else loss


def reward_metrics(pairs: PairLogps, beta: float) -> dict[str, torch.Tensor]:
    """The batch means trl logs, under trl's names: implicit rewards beta * log(pi/ref), how often the chosen
    one's is higher, their margin, and the policy's summed log-probs."""
    chosen, rejected = beta * pairs.chosen_logratios.detach(), beta * pairs.rejected_logratios.detach()
    return {"rewards/chosen": chosen.mean(), "rewards/rejected": rejected.mean(),
            "rewards/accuracies": (chosen > rejected).float().mean(),
            "rewards/margins": (chosen - rejected).mean(),
            "logps/chosen": pairs.chosen.detach().mean(), "logps/rejected": pairs.rejected.detach().mean()}

