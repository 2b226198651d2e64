"""task=grpo over several data-parallel processes: each rank samples and scores the groups of its own
prompts (a group never spans ranks, so advantages need nothing from the others), and the metrics it logs are
those of the whole generation batch, as one process computes them: the per-completion values gathered
(reward means and stds, zero-std groups, lengths), the per-token ones summed with their token counts (clip
ratios, KL, entropy); the rollouts table holds every rank's rows. One process: everything is returned as it
is."""

from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    """Processes in the default group (1 without torch.distributed)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather_rows(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Each (N_r, ...) tensor concatenated over the ranks in rank order (N_r may differ: the last batch of an
    epoch can give ranks different numbers of prompts); with one process, the tensors themselves."""
    if world_size() == 1:
        return list(tensors)
    parts: list = [None] * world_size()
    dist.all_gather_object(parts, [t.detach().cpu() for t in tensors])
    return [torch.cat([p[i] for p in parts]).to(t.device) for i, t in enumerate(tensors)]


def gather_objects(items: list) -> list:
    """Each rank's list (of picklable items: a table's rows) concatenated in rank order; with one process,
    the list itself."""
    if world_size() == 1:
        return items
    parts: list = [None] * world_size()
    dist.all_gather_object(parts, items)
    return [item for part in parts for item in part]


def token_means(means: dict[str, torch.Tensor], tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token means of this rank (over `tokens` tokens) as means over every rank's tokens."""
    if world_size() == 1 or not means:
        return means
    names = sorted(means)
    sums = torch.stack([means[n].detach().float() * tokens for n in names] + [tokens.float()])
    dist.all_reduce(sums)
    return {n: sums[i] / sums[-1].clamp(min=1) for i, n in enumerate(names)}


def largest(value: float) -> float:
    """The largest of the ranks' values (wall times: the step waits for the slowest rank)."""
    if world_size() == 1:
        return value
    out = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return float(out)
