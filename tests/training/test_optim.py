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


def _hand_adamw(params, grads, state, step, lr, betas, eps, decay):
    """AdamW (Loshchilov & Hutter 2019) written out: decoupled decay, bias-corrected moments."""
    b1, b2 = betas
    for i, (p, g) in enumerate(zip(params, grads, strict=True)):
        m, v = state.setdefault(i, (torch.zeros_like(p), torch.zeros_like(p)))
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        state[i] = (m, v)
        m_hat, v_hat = m / (1 - b1**step), v / (1 - b2**step)
        p.mul_(1 - lr * decay[i]).sub_(lr * m_hat / (v_hat.sqrt() + eps))


def test_adamw_fused_steps_equal_hand_written_adamw_with_clipping():
    torch.manual_seed(0)
    model = zoo.build("gpt_nano", vocab_size=50, dropout=0.0)
    cfg = {"name": "adamw_fused", "lr": 1e-2, "weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-8}
    opt = build_optimizer(model, cfg)
    assert all(group["fused"] for group in opt.param_groups)
    params = [p.detach().clone() for p in model.parameters()]
    decay = [0.1 if p.dim() >= 2 else 0.0 for p in model.parameters()]
    state: dict = {}
    ids = torch.randint(3, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    for step in range(1, 4):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)  # what trainer.gradient_clip_val does
        _hand_adamw(params, [p.grad for p in model.parameters()], state, step, 1e-2, (0.9, 0.95), 1e-8, decay)
        opt.step()
        opt.zero_grad(set_to_none=True)
    for got, want in zip(model.parameters(), params, strict=True):
        torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-6)


def test_adamw_fused_refuses_what_the_kernel_cannot_take():
    from zoo.training.optim import check_optim_with_trainer

    meta = torch.nn.Linear(2, 2, device="meta")
    with pytest.raises(ValueError,
                       match=r"adamw_fused: parameter weight is torch.float32 on meta.*optim.name=adamw"):
        build_optimizer(meta, {"name": "adamw_fused", "lr": 1e-3})
    fused = {"name": "adamw_fused", "lr": 1e-3}
    with pytest.raises(ValueError,
                       match=r"trainer.precision=16-mixed cannot clip gradients .*gradient_clip_val=1.0"):
        check_optim_with_trainer(fused, {"precision": "16-mixed", "gradient_clip_val": 1.0})
    check_optim_with_trainer(fused, {"precision": "bf16-mixed", "gradient_clip_val": 1.0})  # no scaler: fine
    check_optim_with_trainer(fused, {"precision": "16-mixed", "gradient_clip_val": 0})
