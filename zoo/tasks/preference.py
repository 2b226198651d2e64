"""Preference pairs as a decoder sees them, the way trl's DPOTrainer builds them: each pair tokenised as
prompt + completion + eos (the completion starting where the tokenised prompt and prompt+completion
diverge), batched [chosen; rejected] right-padded with a completion mask, and scored by the summed
log-probabilities of the completion tokens only, under the policy and under a reference (a frozen copy, or the
same model with its LoRA adapters switched off: no second copy in memory)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from zoo.data.preference import (  # noqa: F401  (re-exported: they moved down to the data floor)
    EncodedPair,
    collate_pairs,
    common_prefix_length,
    encode_pair,
)
from zoo.finetune.lora import LoRALinear
from zoo.tasks.dpo_losses import PairLogps


def completion_logps(logits: torch.Tensor, batch: dict[str, torch.Tensor]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed log-probs, token counts), (2B,) each, of the completion tokens: logits (2B, T, V) at t score
    input_ids at t + 1, counted where completion_mask is 1 at t + 1."""
    targets, mask = batch["input_ids"][:, 1:], batch["completion_mask"][:, 1:]  # (2B, T-1)
    logps = torch.gather(F.log_softmax(logits[:, :-1].float(), dim=-1), 2, targets.unsqueeze(-1)).squeeze(-1)
    return (logps * mask).sum(1), mask.sum(1)


def policy_logps(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """`completion_logps` of `model`'s forward on the batch."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return completion_logps(out.logits, batch)


@contextlib.contextmanager
def adapters_off(model: nn.Module) -> Iterator[nn.Module]:
    """`model` with every LoRA adapter contributing nothing (scaling 0) inside the block: the base model, the
    DPO reference of a finetune=lora run without a second copy. Restored on exit, also on error."""
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    scales = [m.scaling for m in layers]
    try:
        for m in layers:
            m.scaling = 0.0
        yield model
    finally:
        for m, s in zip(layers, scales, strict=True):
            m.scaling = s


def pair_logps(model: nn.Module, reference: nn.Module | None, batch: dict[str, torch.Tensor]) -> PairLogps:
    """The batch's pairs scored by `model` (with gradients) and by `reference` (without), or, when
    `reference` is None, by `model` with its LoRA adapters off."""
    if reference is None and not any(isinstance(m, LoRALinear) for m in model.modules()):
        raise ValueError("the DPO reference is the model with its LoRA adapters off, but it has none "
                         "(finetune=full|freeze): pass a frozen copy as the reference")
    logps, tokens = policy_logps(model, batch)
    with torch.no_grad():
        if reference is None:
            with adapters_off(model):
                ref, _ = policy_logps(model, batch)
        else:
            ref, _ = policy_logps(reference, batch)
    n = logps.shape[0] // 2
    return PairLogps(logps[:n], logps[n:], ref[:n], ref[n:], tokens[:n].to(logps), tokens[n:].to(logps))


def reference_logps(model: nn.Module, pairs: Sequence[EncodedPair], collate: Callable[[list], dict],
                    batch_size: int) -> torch.Tensor:
    """(N, 2) summed log-probs of each pair's chosen and rejected completion under `model` with its LoRA
    adapters off, in eval mode without gradients: the reference as training starts, computed once
    (dpo.reference=precomputed). The model's train/eval mode is restored."""
    device, training, out = next(model.parameters()).device, model.training, []
    try:
        with torch.no_grad(), adapters_off(model):
            model.eval()
            for start in range(0, len(pairs), batch_size):
                batch = collate([pairs[i] for i in range(start, min(start + batch_size, len(pairs)))])
                logps, _ = policy_logps(model, {k: v.to(device) for k, v in batch.items()})
                n = logps.shape[0] // 2
                out.append(torch.stack([logps[:n], logps[n:]], dim=1))
    finally:
        model.train(training)
    return torch.cat(out) if out else torch.zeros(0, 2)
