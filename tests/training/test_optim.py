"""AdamW grouping and the schedules against their closed forms."""

from __future__ import annotations

import math

import pytest
import torch

import zoo
from zoo.training.optim import SCHEDULES, build_optimizer, build_scheduler, param_groups


def test_weight_decay_only_on_matrices():
    model = zoo.build("gpt_nano", vocab_size=50)
    decay, no_decay = param_groups(model, 0.1)
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    # every unique parameter exactly once (the tied head/embedding counted once)
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in no_decay["params"]} >= {"decoder_stack.layers.0.norm_self.weight"}
    opt = build_optimizer(model, {"name": "adamw", "lr": 1e-3, "weight_decay": 0.1})
    assert isinstance(opt, torch.optim.AdamW)


def test_inverse_sqrt_is_the_papers_formula():
    d_model, warmup = 512, 4000
    peak = d_model**-0.5 * warmup**-0.5
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=peak)
    sched = build_scheduler(opt, {"name": "inverse_sqrt", "warmup_steps": warmup}, max_steps=10**6)
    for step in range(1, 12001):
        paper = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        if step in (1, 100, 3999, 4000, 4001, 12000):
            assert opt.param_groups[0]["lr"] == pytest.approx(paper, rel=1e-9)
        opt.step()
        sched.step()


def test_cosine_warmup_then_decay_to_floor():
    f = SCHEDULES.get("cosine")(warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)


def test_bad_schedule_options_name_the_key():
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
    with pytest.raises(ValueError, match="scheduler"):
        build_scheduler(opt, {"name": "cosinus"}, max_steps=10)
    with pytest.raises(ValueError, match=r"Unknown key 'scheduler.min_lr_ratio' \(scheduler=inverse_sqrt\)"):
        build_scheduler(opt, {"name": "inverse_sqrt", "warmup_steps": 5, "min_lr_ratio": 0.1}, max_steps=10)
