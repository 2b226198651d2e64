"""A GRPO generation batch as the policy update reads it, laid out as trl's GRPOTrainer lays it out: prompts
left-padded, completions right-padded after them (each ending at its eos or at the token cap), one
advantage per completion; and the per-token log-probs of the completion tokens under a model, scored at the
temperature they were sampled with."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from zoo.generation.stopping import RowStop
from zoo.tasks.grpo_losses import entropy, token_logps


@dataclass(frozen=True)
class RolloutBatch:
    """B = prompts x num_generations rows: prompt (B, P) left-padded, completion (B, C) right-padded, masks
    1 on real tokens, advantages (B,), and, once computed, the sampling policy's and the reference's
    per-token log-probs (B, C)."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    advantages: torch.Tensor
    old_logps: torch.Tensor | None = None
    ref_logps: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.prompt_ids.shape[0]

    def __getitem__(self, index: slice | torch.Tensor) -> RolloutBatch:
        return self.rows(index)

    def rows(self, index: slice | torch.Tensor) -> RolloutBatch:
        """The rows of `index` (a micro-batch)."""
        pick = lambda t: None if t is None else t[index]  # noqa: E731
        return RolloutBatch(*(pick(getattr(self, f)) for f in self.__dataclass_fields__))

    def with_logps(self, old: torch.Tensor | None = None, ref: torch.Tensor | None = None) -> RolloutBatch:
        return replace(self, old_logps=old, ref_logps=ref)

    def to(self, device: torch.device | str) -> RolloutBatch:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return RolloutBatch(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


def cut_completion(tokens: Sequence[int], stop_ids: Collection[int], stop_strings: Sequence[str] = (),
                   decode: Callable[[list[int]], str] | None = None) -> tuple[list[int], bool]:
    """A sampled row's completion and whether it was clipped: kept through its first stop token (eos, the chat
    template's end of turn) or the token that completes a stop string (its text first contains one, as
    zoo's generate stops it), whichever comes first; clipped (True) when neither came, i.e. the row ran to
    the token cap. The padding generate writes after a stopped row is dropped."""
    stop = RowStop(stop_strings, decode) if stop_strings else None
    for i, token in enumerate(tokens):
        if token in stop_ids or (stop is not None and stop.add(token)):
            return list(tokens[:i + 1]), False
    return list(tokens), True


def cut_text(text: str, stop_strings: Sequence[str]) -> str:
    """`text` cut after the first stop string it contains (the rest of the last token's text dropped)."""
    ends = [text.find(s) + len(s) for s in stop_strings if s in text]
    return text[:min(ends)] if ends else text


def completion_text(tokens: Sequence[int], stop_ids: Collection[int], stop_strings: Sequence[str],
                    decode: Callable[[list[int]], str]) -> str:
    """A cut completion's text as the rewards read it: decoded without its stop tokens, cut after the first
    stop string."""
    return cut_text(decode([t for t in tokens if t not in stop_ids]), stop_strings)


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) (N, max len) of token lists padded on `side` (left | right) with `pad_id`."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        cut = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[i, cut] = torch.tensor(list(row), dtype=torch.long)
        mask[i, cut] = 1
    return ids, mask


def completion_logps(model: nn.Module, batch: RolloutBatch, temperature: float = 1.0,
                     with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, C) log-probs of each completion token under `model` (its logits / temperature) given the prompt
    and the completion before it, and (with_entropy) the (B, C) entropies of those positions."""
    prompt_len = batch.prompt_ids.shape[1]
    input_ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)  # (B, P + C)
    attention_mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    logits = logits[:, prompt_len - 1:-1]  # (B, C, V): position t scores completion token t
    logps = token_logps(logits, batch.completion_ids, temperature)
    return logps, entropy(logits.detach(), temperature) if with_entropy else None
