"""Greedy decoding and sampling: one token per row per step; a row that emits an EOS is finished and
receives pad tokens from then on; the loop ends when every row is finished or the budget is spent."""

from __future__ import annotations

import torch

from zoo.generation.logits import Choice
from zoo.generation.stepper import Stepper


def greedy_or_sample(
    stepper: Stepper,
    max_new_tokens: int,
    *,
    eos_ids: list[int],
    pad_id: int,
    choice: Choice,
    copies: int = 1,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Return (sequences (B * copies, L + steps), raw next-token logits (B * copies, V) of every step).
    `copies` > 1 draws several samples per prompt; the prompt itself is run once."""
    rows = stepper.batch * copies
    finished = torch.zeros(rows, dtype=torch.bool, device=stepper.ids.device)
    eos = torch.tensor(eos_ids, dtype=torch.long, device=finished.device)
    step_logits: list[torch.Tensor] = []
    if max_new_tokens == 0:
        stepper.expand(copies)
    for step in range(max_new_tokens):
        logits = stepper.next_logits()  # (B, V)
        if step == 0 and copies > 1:
            stepper.expand(copies)
            logits = logits.repeat_interleave(copies, 0)
        step_logits.append(logits)
        tokens = choice.pick(logits).masked_fill(finished, pad_id)  # (B,)
        stepper.append(tokens)
        finished |= torch.isin(tokens, eos)
        if bool(finished.all()):
            break
    return stepper.ids, step_logits
