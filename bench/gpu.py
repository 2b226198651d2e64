"""The GPU check, one script for one card in a few minutes (`python -m bench.run --sections gpu`, or
`python -m bench.gpu` to print it without storing): the `gpt2` preset's training tokens/s at bf16-mixed vs
32-true, with and without torch.compile; which SDPA backends run its attention (flash, memory-efficient,
cuDNN, math); MFU against the card's peak bf16 matmul FLOP/s; generation tokens/s with the dynamic cache vs
the static cache + compiled step; peak memory of every side.

`python -m bench.gpu --dry-run` runs the same plan on CPU with a tiny model and one step per side: it checks
the plan, the FLOP counts, the peak lookup and every measurement's code path without a GPU (tests do this).
Sharded training on several GPUs (DDP vs FSDP2 tokens/s and memory per device) is bench/gpu_sharded.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

import zoo
from bench.common import Section, interleaved, markdown_table
from zoo.inspection import flops_per_token
from zoo.training.optim import build_optimizer

if TYPE_CHECKING:
    from bench.gpu_sharded import ShardedPlan

# dense bf16 tensor-core peak FLOP/s (vendor data sheets, no sparsity), matched on the device name
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "L4": 121e12,
             "RTX 4090": 165e12, "RTX 3090": 71e12, "V100": 125e12, "T4": 65e12}
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


@dataclass(frozen=True)
class Plan:
    """What is measured and at which size: the real check (gpt2 on CUDA) or the CPU dry run."""

    device: str
    preset: str
    overrides: dict = field(default_factory=dict)
    batch: int = 8
    seq_len: int = 1024
    steps: int = 5  # training steps per timed call
    repeats: int = 3
    prompt_len: int = 64
    new_tokens: int = 256
    compile: bool = True  # False leaves out the compiled sides (the fast CPU test of the plan)
    sides: tuple[tuple[str, str, bool], ...] = (("32-true", "32-true", False),
                                                ("bf16-mixed", "bf16-mixed", False),
                                                 ("bf16-mixed + compile", "bf16-mixed", True))

    @classmethod
    def gpu(cls) -> Plan:
        return cls("cuda", "gpt2", {"dropout": 0.0})

    @classmethod
    def dry_run(cls, compile: bool = True) -> Plan:
        return cls("cpu", "gpt2",
                   {"n_layers": 1, "d_model": 64, "n_heads": 2, "vocab_size": 128, "max_seq_len": 64,
                    "dropout": 0.0}, batch=2, seq_len=32, steps=1, repeats=1, prompt_len=4,
                   new_tokens=4, compile=compile)

    @property
    def training_sides(self) -> tuple[tuple[str, str, bool], ...]:
        return tuple(side for side in self.sides if self.compile or not side[2])


def peak_flops(device_name: str) -> float | None:
    """The card's dense bf16 peak from PEAK_BF16 (longest matching name first), None if unknown."""
    for key in sorted(PEAK_BF16, key=len, reverse=True):
        if key in device_name:
            return PEAK_BF16[key]
    return None


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _peak_memory_reset(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_memory_gib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def training_model(plan: Plan | ShardedPlan, device: torch.device | str
                   ) -> tuple[torch.nn.Module, torch.Tensor]:
    """The plan's preset in training mode on `device` (seed 0, the same weights on every rank) and a random
    batch of plan.batch rows of plan.seq_len + 1 ids (inputs and shifted targets); shared by both GPU
    checks."""
    torch.manual_seed(0)
    model = zoo.build(plan.preset, **plan.overrides).to(device).train()
    model.inputs_checked_on_host = True
    ids = torch.randint(3, model.config.vocab_size, (plan.batch, plan.seq_len + 1), device=device)
    return model, ids


def bf16_autocast(device: str, on: bool) -> AbstractContextManager:
    """bf16 autocast on `device` when `on`, else nothing (fp32, or a wrapper that casts itself)."""
    return torch.autocast(device, dtype=torch.bfloat16) if on else nullcontext()


def lm_backward(forward: Callable[..., object], ids: torch.Tensor, autocast: AbstractContextManager) -> None:
    """The LM loss of ids[:, :-1] predicting ids[:, 1:] (forward under `autocast`, loss in fp32), backward."""
    with autocast:
        logits = forward(input_ids=ids[:, :-1]).logits  # (B, T, V)
    F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten()).backward()


def training_side(plan: Plan, precision: str, compiled: bool) -> tuple[Callable[[], None], torch.nn.Module]:
    """A closure running plan.steps training steps (lm loss, clipping at 1.0, AdamW fused) at `precision`."""
    model, ids = training_model(plan, plan.device)
    forward = torch.compile(model) if compiled else model
    optimizer = build_optimizer(model, {"name": "adamw_fused", "lr": 1e-4, "weight_decay": 0.1})
    autocast = bf16_autocast(plan.device, precision == "bf16-mixed")

    def run() -> None:
        for _ in range(plan.steps):
            lm_backward(forward, ids, autocast)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        _sync(plan.device)

    return run, model


def sdpa_backends(plan: Plan) -> dict[str, str]:
    """backend -> 'runs (x ms)' or why not, for the preset's attention shape at bf16 (causal)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = zoo.resolve_config(plan.preset, **plan.overrides)
    dtype = torch.bfloat16 if plan.device == "cuda" else torch.float32
    head_dim = cfg.d_model // cfg.n_heads
    q, k, v = (torch.randn(plan.batch, cfg.n_heads, plan.seq_len, head_dim, device=plan.device, dtype=dtype)
               for _ in range(3))  # (B, H, T, D)
    found = {}
    for name in SDPA_BACKENDS:
        try:
            with sdpa_kernel([getattr(SDPBackend, name)]):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
                _sync(plan.device)
                start = time.perf_counter()
                for _ in range(10):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)
                _sync(plan.device)
            found[name] = f"runs ({(time.perf_counter() - start) * 100:.3f} ms)"
        except (RuntimeError, AttributeError) as e:
            found[name] = "does not run: " + (str(e).strip().splitlines() or [type(e).__name__])[0][:80]
    return found


def generation_sides(plan: Plan) -> dict[str, Callable[[], None]]:
    """Greedy generation of plan.new_tokens: dynamic KV cache vs static cache with the compiled step."""
    torch.manual_seed(0)
    model = zoo.build(plan.preset, **plan.overrides).to(plan.device).eval()
    if plan.device == "cuda":
        model = model.to(torch.bfloat16)
    prompt = torch.randint(3, model.config.vocab_size, (1, plan.prompt_len), device=plan.device)
    common = dict(max_new_tokens=plan.new_tokens, do_sample=False, eos_token_id=None)

    def side(**kwargs) -> Callable[[], None]:
        def run() -> None:
            model.generate(prompt, **common, **kwargs)
            _sync(plan.device)
        return run

    static = "static cache + compile" if plan.compile else "static cache"
    return {"dynamic cache": side(), static: side(cache_implementation="static", compile=plan.compile)}


def measure(plan: Plan) -> dict:
    device_name = torch.cuda.get_device_name(0) if plan.device == "cuda" else "CPU (dry run)"
    tokens = plan.steps * plan.batch * plan.seq_len
    training, models, compile_s, memory = {}, {}, {}, {}
    for label, precision, compiled in plan.training_sides:
        training[label], models[label] = training_side(plan, precision, compiled)
        _peak_memory_reset(plan.device)
        start = time.perf_counter()
        training[label]()  # first call: compiles (compiled side) and allocates the optimizer state
        compile_s[label] = time.perf_counter() - start
        memory[label] = _peak_memory_gib(plan.device)
    timings = interleaved(training, warmup=0, repeats=plan.repeats)
    flops = flops_per_token(models["32-true"], plan.seq_len).training
    gen = generation_sides(plan)
    for run in gen.values():
        run()  # warm-up (compiles the decode step)
    gen_timings = interleaved(gen, warmup=0, repeats=plan.repeats)
    return {"device": device_name, "peak": peak_flops(device_name), "flops_per_token": flops,
            "tokens_per_s": {k: tokens / t.median for k, t in timings.items()}, "first_call_s": compile_s,
            "memory_gib": memory, "sdpa": sdpa_backends(plan),
            "generation_tok_s": {k: plan.new_tokens / t.median for k, t in gen_timings.items()}}


def section(plan: Plan, r: dict) -> Section:
    gib = lambda v: f"{v:.1f}" if v is not None else "n/a"  # noqa: E731
    base = r["tokens_per_s"]["32-true"]
    rows = []
    for label, tps in r["tokens_per_s"].items():
        mfu = f"{tps * r['flops_per_token'] / r['peak']:.1%}" if r["peak"] else "peak unknown"
        rows.append([label, f"{tps:,.0f}", f"{tps / base:.2f}", mfu, f"{r['first_call_s'][label]:.0f}",
                     gib(r["memory_gib"][label])])
    table = markdown_table(["training (`" + plan.preset + "`)", "tokens/s", "vs 32-true", "MFU (bf16 peak)",
                            "first step s", "peak memory GiB"], rows)
    gen = r["generation_tok_s"]
    notes = [
        f"Device: {r['device']}; peak bf16 {r['peak'] / 1e12:.0f} TFLOP/s (data sheet, dense)"
        if r["peak"] else
        f"Device: {r['device']}; its peak is not in bench/gpu.py PEAK_BF16: no MFU",
        f"B={plan.batch}, T={plan.seq_len}, {plan.steps} steps per timed call, {plan.repeats} repeats "
        "alternating; AdamW fused, clipping at 1.0, dropout 0; MFU = tokens/s x training FLOPs per token "
        f"({r['flops_per_token'] / 1e6:,.1f} MFLOP, zoo.inspection.flops_per_token) / peak.",
        "SDPA backends at the attention shape (bf16, causal): "
        + "; ".join(f"{k}: {v}" for k, v in r["sdpa"].items()),
        "Generation "
        f"({plan.prompt_len}-token prompt, {plan.new_tokens} new tokens, greedy, batch 1, bf16 on CUDA): "
        + ", ".join(f"{k} {v:,.0f} tok/s" for k, v in gen.items())
        + f" ({list(gen.values())[-1] / gen['dynamic cache']:.2f}x).",
    ]
    return Section("GPU check", table, notes, {"result": r})


def run(quick: bool = False) -> Section:
    """The bench.run section: the real check on CUDA; without a GPU it refuses (nothing is stored)."""
    if not torch.cuda.is_available():
        raise RuntimeError("the gpu section needs a CUDA device "
                           "(python -m bench.gpu --dry-run checks it on CPU)")
    plan = Plan.gpu()
    if quick:
        plan = Plan(plan.device, plan.preset, plan.overrides, batch=2, seq_len=128, steps=1, repeats=1,
                    new_tokens=16)
    return section(plan, measure(plan))


def dry_run() -> Section:
    plan = Plan.dry_run()
    return section(plan, measure(plan))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the whole plan on CPU with a tiny model")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print((dry_run() if args.dry_run else run(args.quick)).markdown())
