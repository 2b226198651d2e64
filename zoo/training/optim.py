"""Optimizers and learning-rate schedules, each registered by name: `optim.name` adamw (weight decay on
matrices only), adamw_fused (the same update in torch's fused kernel) or muon (Muon for hidden matrices +
AdamW for the rest); `scheduler.name` below.

Schedules are multipliers of the peak `optim.lr`, evaluated per optimizer step:
- `cosine`: linear warmup to 1, then cosine down to `min_lr_ratio` at `max_steps`.
- `inverse_sqrt` (Vaswani et al. 2017): `min(step / warmup, sqrt(warmup / step))`; with
  `lr = d_model**-0.5 * warmup**-0.5` this is exactly the paper's `d_model**-0.5 * min(step**-0.5,
  step * warmup**-1.5)`.
- `constant`: linear warmup, then 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

import torch
from torch import nn

from zoo.options import TEXT, Options, check_entry, integer, number
from zoo.registry import Registry
from zoo.training.muon import MuonWithAdamW, muon_matrices

OPTIMIZERS: Registry = Registry("optimizer", key="optim.name")
SCHEDULES: Registry = Registry("scheduler")
Positive = Annotated[float, number(0, low_open=True)]
NonNegative = Annotated[float, number(0)]
Beta = Annotated[float, number(0, 1, high_open=True)]


def param_groups(model: nn.Module, weight_decay: float,
                 params: list[nn.Parameter] | None = None) -> list[dict[str, Any]]:
    """Decay only tensors with >= 2 dims (matrices, embeddings); biases and norm gains are not decayed.
    Tied tensors appear once (parameters() removes duplicates). `params` limits the groups to a subset."""
    chosen = [p for p in (params if params is not None else model.parameters()) if p.requires_grad]
    decay = [p for p in chosen if p.dim() >= 2]
    no_decay = [p for p in chosen if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@OPTIMIZERS.register("adamw")
def adamw(model: nn.Module, *, lr: Positive, weight_decay: NonNegative = 0.0,
          betas: tuple[Beta, Beta] = (0.9, 0.999), eps: Positive = 1e-8) -> torch.optim.Optimizer:
    """AdamW over `param_groups` (decay on matrices only)."""
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=tuple(betas), eps=eps)


@OPTIMIZERS.register("adamw_fused")
def adamw_fused(model: nn.Module, *, lr: Positive, weight_decay: NonNegative = 0.0,
                betas: tuple[Beta, Beta] = (0.9, 0.999), eps: Positive = 1e-8) -> torch.optim.Optimizer:
    """`adamw` in torch's fused kernel (`fused=True`: one kernel per parameter group instead of a loop of
    element-wise ops). Parameters on a device or in a dtype the kernel lacks raise ValueError (no fallback:
    `optim.name=adamw` is the unfused choice)."""
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    devices = _get_fused_kernels_supported_devices()
    for name, p in model.named_parameters():
        if p.requires_grad and (p.device.type not in devices or not torch.is_floating_point(p)):
            raise ValueError(f"optim.name=adamw_fused: parameter {name} is {p.dtype} on {p.device.type}; the "
                             "fused AdamW kernel takes floating-point tensors "
                             f"on {', '.join(devices)}. Use optim.name=adamw.")
    groups = param_groups(model, weight_decay)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=True)


def check_optim_with_trainer(optim: Mapping[str, Any], trainer: Mapping[str, Any]) -> None:
    """The optimizer's needs of the trainer: a fused AdamW unscales 16-mixed gradients inside its step, so
    gradient clipping (which needs them unscaled before the step) cannot run with it (Lightning refuses)."""
    clip = trainer.get("gradient_clip_val") or 0
    if optim.get("name") == "adamw_fused" and str(trainer.get("precision")).startswith("16") and clip > 0:
        raise ValueError(f"optim.name=adamw_fused with trainer.precision={trainer['precision']} cannot clip "
                         f"gradients (trainer.gradient_clip_val={clip}): the fused step unscales them "
                         "itself. Use trainer.precision=bf16-mixed, "
                         "trainer.gradient_clip_val=0 or optim.name=adamw.")


def check_optimizer_model(model: nn.Module, cfg: Mapping[str, Any]) -> None:
    """What optimizer `optim.name` needs of `model` (a builder's `needs(model)` raises ValueError otherwise),
    checked on prepare's meta-device model (finetune applied), before any data."""
    check = getattr(OPTIMIZERS.get(cfg.get("name", "adamw")), "needs", None)
    if check is not None:
        check(model)


@OPTIMIZERS.register("muon")
def muon(model: nn.Module, *, lr: Positive, weight_decay: NonNegative = 0.0, momentum: Beta = 0.95,
         ns_steps: Annotated[int, integer(1)] = 5, betas: tuple[Beta, Beta] = (0.9, 0.95),
         eps: Positive = 1e-8) -> torch.optim.Optimizer:
    """Muon (momentum orthogonalised by Newton-Schulz, torch.optim.Muon) for the hidden weight matrices, AdamW
    for the rest (embeddings, the output head, norms, biases). Muon's step is rescaled to AdamW's RMS
    (`adjust_lr_fn="match_rms_adamw"`), so one optim.lr serves both."""
    hidden = muon_matrices(model)
    chosen = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in chosen]
    inner_muon = torch.optim.Muon(hidden, lr=lr, weight_decay=weight_decay, momentum=momentum,
                                  ns_steps=ns_steps, adjust_lr_fn="match_rms_adamw")
    inner_adamw = torch.optim.AdamW(param_groups(model, weight_decay, rest), lr=lr, betas=tuple(betas),
                                    eps=eps)
    return MuonWithAdamW(inner_muon, inner_adamw)


muon.needs = muon_matrices  # check_optimizer_model runs it on prepare's meta-device model


def optimizer_options(name: str) -> Options:
    """optim.* keys of optimizer `name`: its builder's keyword parameters plus `name`."""
    return Options.of(OPTIMIZERS.get(name), skip=("model",)).extended({"name": TEXT})


def check_optim(cfg: Mapping[str, Any]) -> None:
    """optim.name and the keys and values that optimizer takes (ValueError naming key and value)."""
    check_entry("optim", cfg.get("name", "adamw"), cfg, optimizer_options, OPTIMIZERS)  # unknown: get raises


def build_optimizer(model: nn.Module, cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    """`optim: {name: adamw | adamw_fused | muon, lr, weight_decay, ...}` -> the optimizer, after
    check_optim."""
    check_optim(cfg)
    options = {k: (tuple(v) if isinstance(v, list) else v) for k, v in cfg.items() if k != "name"}
    return OPTIMIZERS.get(cfg.get("name", "adamw"))(model, **options)


class Warmup:
    """Base multiplier: `step` counts optimizer steps from 0; warmup ramps linearly from 1/warmup, then the
    schedule's `after(step)` takes over."""

    def __init__(self, warmup_steps: int, max_steps: int) -> None:
        if warmup_steps < 0:
            raise ValueError(f"scheduler.warmup_steps must be >= 0, got {warmup_steps}")
        self.warmup_steps, self.max_steps = int(warmup_steps), int(max_steps)

    def __call__(self, step: int) -> float:
        return (step + 1) / self.warmup_steps if step < self.warmup_steps else self.after(step)


@SCHEDULES.register("constant")
class Constant(Warmup):
    def after(self, step: int) -> float:
        return 1.0


@SCHEDULES.register("cosine")
class CosineWithWarmup(Warmup):
    def __init__(self, warmup_steps: int, max_steps: int, min_lr_ratio: float = 0.1) -> None:
        super().__init__(warmup_steps, max_steps)
        if max_steps < 1:
            raise ValueError(f"scheduler=cosine needs trainer.max_steps >= 1, got {max_steps}")
        if not 0.0 <= min_lr_ratio <= 1.0:
            raise ValueError(f"scheduler.min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
        self.min_lr_ratio = float(min_lr_ratio)

    def after(self, step: int) -> float:
        span = max(1, self.max_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@SCHEDULES.register("inverse_sqrt")
class InverseSqrt(Warmup):
    def __init__(self, warmup_steps: int, max_steps: int) -> None:
        super().__init__(warmup_steps, max_steps)
        if warmup_steps < 1:
            raise ValueError("scheduler=inverse_sqrt needs scheduler.warmup_steps >= 1")

    def __call__(self, step: int) -> float:
        s = step + 1  # the paper counts steps from 1
        return min(s / self.warmup_steps, math.sqrt(self.warmup_steps / s))


def schedule_options(name: str) -> Options:
    """scheduler.* keys of schedule `name`: its constructor's keyword parameters (max_steps comes from
    trainer.max_steps) plus `name`."""
    return Options.of(SCHEDULES.get(name).__init__, skip=("max_steps",)).extended({"name": TEXT})


def lr_multiplier(cfg: Mapping[str, Any], max_steps: int) -> Warmup:
    """`scheduler: {name, warmup_steps, ...}` -> the per-step multiplier; bad names/options raise
    ValueError (train.py calls this while validating, before anything runs)."""
    name = cfg.get("name", "cosine")
    check_entry("scheduler", name, cfg, schedule_options, SCHEDULES)
    return SCHEDULES.get(name)(max_steps=max_steps, **{k: v for k, v in cfg.items() if k != "name"})


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: Mapping[str, Any], max_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step LambdaLR over `lr_multiplier` (the multiplier is picklable, so it checkpoints)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(cfg, max_steps))
