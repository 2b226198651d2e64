"""The throughput callback against a hand count: tokens of the last `window` batches (attention-mask
counted, times the world size) over the time they took, on a fake clock."""

from __future__ import annotations

import types

import pytest
import torch

from zoo.training import callbacks
from zoo.training.callbacks import TokensPerSecond
from zoo.training.console import token_count


def _batch(lengths: list[int], width: int = 8) -> dict[str, torch.Tensor]:
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": torch.ones_like(mask), "attention_mask": mask}


def test_batch_tokens_counts_real_tokens_on_both_sides():
    batch = {**_batch([8, 3]), "decoder_input_ids": torch.ones(2, 5, dtype=torch.long),
             "decoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])}
    assert int(token_count(batch)) == 11 + 7


def test_token_count_needs_no_host_sync():
    masked = _batch([8, 3])
    assert isinstance(token_count(masked), torch.Tensor) and int(token_count(masked)) == 11
    plain = {"input_ids": torch.ones(3, 5, dtype=torch.long)}
    assert token_count(plain) == 15 and isinstance(token_count(plain), int)


@pytest.mark.parametrize("world_size", [1, 4])
def test_tokens_per_second_over_the_window(monkeypatch, world_size):
    clock = iter([10.0, 10.5, 11.5, 13.0, 13.25])  # batch end times
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: next(clock))
    logged: list[float] = []
    module = types.SimpleNamespace(log=lambda name, value, prog_bar: logged.append(value))
    trainer = types.SimpleNamespace(world_size=world_size, global_step=1, log_every_n_steps=1)
    cb = TokensPerSecond(window=2)
    lengths = [[8, 8], [4, 2], [8, 1], [3, 3], [5, 5]]  # real tokens per batch: 16, 6, 9, 6, 10
    for step, row in enumerate(lengths):
        cb.on_train_batch_end(trainer, module, None, _batch(row), step)
    # each value: tokens of the last `window` batches / time since the batch before them ended
    expected = [6 / 0.5, (6 + 9) / 1.5, (9 + 6) / 2.5, (6 + 10) / 1.75]
    assert logged == pytest.approx([world_size * e for e in expected])
    cb.on_validation_start(trainer, module)  # validation time is not training time: the window restarts
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: 20.0)
    cb.on_train_batch_end(trainer, module, None, _batch([1]), 5)
    assert len(logged) == 4


def test_tokens_per_second_is_logged_on_logging_steps_only():
    logged: list[int] = []
    module = types.SimpleNamespace(log=lambda name, value, prog_bar: logged.append(trainer.global_step))
    trainer = types.SimpleNamespace(world_size=1, global_step=0, log_every_n_steps=3)
    cb = TokensPerSecond(window=2)
    for step in range(1, 10):  # global_step has counted the step when on_train_batch_end runs
        trainer.global_step = step
        cb.on_train_batch_end(trainer, module, None, _batch([4]), step - 1)
    assert logged == [3, 6, 9]
