"""Reward functions a user writes (`grpo.rewards=[tests.tasks.grpo_user_rewards:<name>]`), for the tests."""


def length_bonus(prompts, completions, completion_ids, **fields):
    """0.1 per completion token, from the ids trl passes."""
    return [0.1 * len(ids) for ids in completion_ids]


def uses_difficulty(prompts, completions, difficulty, **fields):
    """The row's own field, passed by name as trl passes dataset columns."""
    return [float(d) for d in difficulty]


def raises_on_seven(prompts, completions, **fields):
    return [1.0 / (0 if "7" in c else 1) for c in completions]


def one_short(prompts, completions, **fields):
    return [0.0] * (len(completions) - 1)


def nan_on_second(prompts, completions, **fields):
    return [float("nan") if i == 1 else 0.0 for i in range(len(completions))]


NOT_A_FUNCTION = 3


SEEN: list[tuple[list[str], list[list[int]]]] = []  # what `record` was called with, call by call


def record(prompts, completions, completion_ids, **fields):
    """0 for every completion; keeps the texts and ids the reward saw (in SEEN)."""
    SEEN.append((list(completions), [list(ids) for ids in completion_ids]))
    return [0.0] * len(completions)


def logged_by_rank(prompts, completions, **fields):
    """len(completion) + the row's answer / 10, each call appended to $ZOO_TEST_REWARD_LOG/rank<r>.jsonl
    (prompts and values): which process (torch.distributed's rank) scored which prompts in a DDP run."""
    import json
    import os
    from pathlib import Path

    import torch.distributed as dist

    values = [len(c) + float(a) / 10 for c, a in zip(completions, fields["answer"], strict=True)]
    rank = dist.get_rank() if dist.is_initialized() else 0
    path = Path(os.environ["ZOO_TEST_REWARD_LOG"]) / f"rank{rank}.jsonl"
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"prompts": list(prompts), "values": values}) + "\n")
    return values
