"""Compiled training on CPU: what `compile.enabled=true` costs (seconds until the first compiled step is done)
and what it pays back (steady-state training steps/s, compiled vs eager), with `optim.name=adamw_fused` as a
third side. Each side is a bare loop of the training module's step: the model compiled as
`ZooLightningModule` compiles it (the forward; the lm task's cross-entropy outside), backward, clipping at
train.py's gradient_clip_val, the optimizer step."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import zoo
from bench.common import Section, goal, interleaved, markdown_table, step_loop
from bench.lightning_path import train_config
from zoo.training.optim import build_optimizer

TRAIN_CFG = train_config()
CLIP = TRAIN_CFG["trainer"].get("gradient_clip_val")
GOAL = 1.2  # compiled / eager steady-state tokens/s at gpt_small (issue 15 item 2)


@dataclass(frozen=True)
class Shape:
    label: str
    preset: str
    batch: int
    seq_len: int
    overrides: tuple[tuple[str, object], ...] = ()


SHAPES = {
    False: [Shape("gpt 0.8M", "gpt_small", 12, 64, (("n_layers", 4), ("d_model", 128), ("n_heads", 4),
                                                    ("max_seq_len", 64), ("vocab_size", 96))),
            Shape("gpt_small", "gpt_small", 4, 128)],
    True: [Shape("gpt tiny", "gpt_small", 2, 16, (("n_layers", 1), ("d_model", 32), ("n_heads", 2),
                                                  ("vocab_size", 64), ("max_seq_len", 16)))],
}


def training_loop(shape: Shape, *, compiled: bool, optim: str, steps: int) -> Callable[[], float]:
    """A closure running `steps` lm training steps on one fixed batch; returns the last loss."""
    torch.manual_seed(0)
    model = zoo.build(shape.preset, **dict(shape.overrides), dropout=0.0).train()
    model.inputs_checked_on_host = True  # as during fit: ids are range-checked on the host, once per batch
    forward = torch.compile(model) if compiled else model
    optimizer = build_optimizer(model, {**TRAIN_CFG["optim"], "name": optim})
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (shape.batch, shape.seq_len + 1), generator=gen)
    inputs, targets = ids[:, :-1], ids[:, 1:]

    def loss() -> torch.Tensor:
        logits = forward(input_ids=inputs).logits  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    return step_loop(loss, model, optimizer, steps, CLIP)


def measure(shape: Shape, quick: bool) -> dict:
    steps, warmup, repeats = (1, 1, 2) if quick else (2, 1, 9)
    sides = {"eager": training_loop(shape, compiled=False, optim="adamw", steps=steps),
             "compiled": training_loop(shape, compiled=True, optim="adamw", steps=steps),
             "eager + adamw_fused": training_loop(shape, compiled=False, optim="adamw_fused", steps=steps)}
    torch._dynamo.reset()
    first = {}
    for name in ("eager", "compiled"):  # the first call of each: compile time = the difference
        start = time.perf_counter()
        sides[name]()
        first[name] = time.perf_counter() - start
    timings = interleaved(sides, warmup=warmup, repeats=repeats)
    tokens = steps * shape.batch * shape.seq_len
    return {"shape": shape, "compile_s": first["compiled"] - first["eager"],
            "tokens_per_s": {n: tokens / t.median for n, t in timings.items()},
            "spread": {n: t.spread for n, t in timings.items()}, "steps": steps, "repeats": repeats}


def section(rows: list[dict]) -> Section:
    headers = ["model (shape)", "compile s (first step)", "eager tok/s", "compiled tok/s", "compiled / eager",
               "eager + adamw_fused tok/s", "fused / adamw", "spread (eager, compiled, fused)"]
    table, goals = [], []
    for r in rows:
        tps, s = r["tokens_per_s"], r["shape"]
        speedup, fused = tps["compiled"] / tps["eager"], tps["eager + adamw_fused"] / tps["eager"]
        extra = ", ".join(f"{k}={v}" for k, v in s.overrides)
        table.append([f"`{s.preset}`{' (' + extra + ')' if extra else ''}, B={s.batch}, T={s.seq_len}",
                      f"{r['compile_s']:.0f}", f"{tps['eager']:,.0f}", f"{tps['compiled']:,.0f}",
                      f"{speedup:.2f}" + (f" ({goal(speedup, GOAL)})" if s.label == "gpt_small" else ""),
                      f"{tps['eager + adamw_fused']:,.0f}", f"{fused:.2f}",
                      ", ".join(f"{v:.0%}" for v in r["spread"].values())])
        if s.label == "gpt_small":
            goals.append(("compile: compiled / eager training at gpt_small (CPU)", speedup, GOAL))
    r0 = rows[0]
    notes = [
        "Each side: a bare loop of the training step (forward, the lm cross-entropy, backward, clipping at "
        f"{CLIP}, the optimizer with train.py's optim settings), one fixed random batch, fp32, dropout 0. "
        "`compiled` = `torch.compile(model)` with the default inductor backend and mode, as "
        "`ZooLightningModule` does for `compile.enabled=true`.",
        "compile s: the compiled side's first call minus the eager side's first call (dynamo tracing, AOT "
        "autograd and inductor code generation for forward and backward; inductor's on-disk cache shortens "
        "a repeat run; this section compiles with a fresh cache folder and the FX-graph and AOT-autograd "
        "caches off, so it is the cold cost a first run pays).",
        f"tokens/s: {r0['steps']} steps per timed call, {r0['repeats']} repeats after one warm-up, the sides "
        "alternating; spread = (max - min) / median of each "
        "side's repeats (how loaded the shared machine was).",
    ]
    return Section("Compiled training (CPU)", markdown_table(headers, table), notes, {"rows": rows}, goals)


def run(quick: bool = False) -> Section:
    """Compiles cold: a fresh inductor cache folder and no FX-graph / AOT-autograd cache hits, so the compile
    seconds are what a first run pays (a warm on-disk cache makes a repeat run's compile take ~1-2 s)."""
    import torch._functorch.config
    import torch._inductor.config

    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache, torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        try:
            return section([measure(shape, quick) for shape in SHAPES[quick]])
        finally:
            if before is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).markdown())
