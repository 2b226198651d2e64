"""Greedy decoding and sampling: one token per row per step; a row that emits an EOS is finished and
receives pad tokens from then on; the loop ends when every row is finished or the budget is spent."""

from __future__ import annotations

import torch

from zoo.generation.logits import Choice
from zoo.generation.stepper import Stepper
from zoo.generation.stopping import StopStrings


def greedy_or_sample(
    stepper: Stepper,
    max_new_tokens: int,
    *,
    eos_ids: list[int],
    pad_id: int,
    choice: Choice,
    copies: int = 1,
    stop: StopStrings | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Return (sequences (B * copies, L + steps), raw next-token logits (B * copies, V) of every step).
    `copies` > 1 draws several samples per prompt; the prompt itself is run once. `stop`: a row also
    finishes when its text contains a stop string (checked every token, so the loop ends on time)."""
    rows = stepper.batch * copies
    finished = torch.zeros(rows, dtype=torch.bool, device=stepper.ids.device)
    eos = torch.tensor(eos_ids, dtype=torch.long, device=finished.device)
    step_logits: list[torch.Tensor] = []
    if max_new_tokens == 0:
        stepper.expand(copies)
    greedy = not choice.sample
    for step in range(max_new_tokens):
        logits, tokens = stepper.next_tokens(greedy)  # (B, V), greedy: (B,) picked with the logits
        if step == 0 and copies > 1:
            stepper.expand(copies)
            logits = logits.repeat_interleave(copies, 0)
        step_logits.append(logits)
        if tokens is None or copies > 1:
            tokens = choice.pick(logits)
        tokens = tokens.masked_fill(finished, pad_id)  # (B,)
        stepper.append(tokens)
        ended = torch.isin(tokens, eos) | (stop.update(tokens, finished) if stop is not None else False)
        finished |= ended
        if stop is not None or (step + 1) % stepper.check_every == 0 or step + 1 == max_new_tokens:
            if bool(finished.all()):
                break
    if stop is not None or not eos_ids or not bool(finished.all()):
        return stepper.ids, step_logits
    # checked every k steps: end where the last row finished, as a check after every token would have
    steps = len(step_logits)
    new = stepper.ids[:, -steps:]  # (B, steps)
    end = int(torch.isin(new, eos).int().argmax(dim=1).max()) + 1  # each row's first EOS; the last of them
    return stepper.ids[:, : stepper.ids.shape[1] - steps + end], step_logits[:end]
