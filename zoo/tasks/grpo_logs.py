"""What task=grpo logs besides its scalars: the completions table (trl's, one row per completion) and the
rollout metrics' validation means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch
from torchmetrics import Metric

from zoo.tasks.rewards import Reward, weighted

ROLLOUT = "rollout"  # batch key: the step's RolloutBatch (set by prepare_batch)


class LogsRollouts(Protocol):
    """The bound task (zoo.tasks.grpo.GRPORun): its latest rollout's metrics."""

    logged: Mapping[str, Any]


def rollout_table(step: int, prompts: list[str], texts: list[str], per_reward: torch.Tensor,
                  rewards: list[Reward], advantages: torch.Tensor) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows): one row per completion: the step, prompt, completion text, each reward's value, the
    weighted reward and the advantage (trl's logged completions table)."""
    columns = ["step", "prompt", "completion", *(r.name for r in rewards), "reward", "advantage"]
    total = weighted(per_reward, rewards)
    rows = [[step, prompt, text, *per_reward[i].tolist(), float(total[i]), float(advantages[i])]
            for i, (prompt, text) in enumerate(zip(prompts, texts, strict=True))]
    return columns, rows


class RolloutMean(Metric):
    """One rollout metric's mean over validation completions (the bound task's latest rollout)."""

    full_state_update = False

    def __init__(self, name: str, run: LogsRollouts) -> None:
        super().__init__()
        self.name, self.run = name, run
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, out, batch: Mapping[str, Any]) -> None:
        n = len(batch[ROLLOUT])
        self.total += float(self.run.logged[self.name]) * n
        self.count += n

    def compute(self) -> torch.Tensor:
        return self.total / self.count.clamp(min=1)
