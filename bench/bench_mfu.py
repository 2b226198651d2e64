"""Model FLOP utilisation: achieved training FLOP/s (closed-form FLOPs per token from
`zoo.inspection.flops_per_token` x tokens/s of a bare training loop) over this machine's peak fp32 matmul
FLOP/s, measured in the same run, interleaved with the training steps so both see the same load.

Also where the time goes (torch.profiler top ops of one training step) and the same step with
`torch.optim.AdamW(fused=True)`, the waste the profile points at on CPU (the per-tensor AdamW loop)."""

from __future__ import annotations

from collections.abc import Callable

import torch

import zoo
from bench.bench_training import OPTIM, SHAPES, Shape, bare_step, random_batch
from bench.common import Section, interleaved, markdown_table, step_loop, top_ops, top_ops_table
from zoo.inspection import flops_per_token
from zoo.training.optim import param_groups

MATMUL_SIZE = {False: 1024, True: 128}


def matmul_call(n: int, dtype: torch.dtype = torch.float32) -> Callable[[], None]:
    """One (n x n) @ (n x n) product: 2 n^3 FLOPs."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    out = torch.empty(n, n, dtype=dtype)
    return lambda: torch.mm(a, b, out=out)


def fused_adamw_step(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                     steps: int) -> Callable[[], float]:
    """Like `bench_training.bare_step` but with the fused AdamW kernel (same hyper-parameters)."""
    model.train()
    optimizer = torch.optim.AdamW(
        param_groups(model, OPTIM["weight_decay"]), lr=OPTIM["lr"], betas=OPTIM["betas"], fused=True
    )

    return step_loop(lambda: model(**batch).loss, model, optimizer, steps)


def measure_shape(shape: Shape, quick: bool) -> dict:
    warmup, repeats, steps = (1, 2, 1) if quick else (1, 5, 1)
    cfg = shape.config()
    batch = random_batch(cfg, shape.batch, shape.seq_len)
    torch.manual_seed(0)
    model = zoo.build(cfg)
    torch.manual_seed(0)
    fused_model = zoo.build(cfg)
    n = MATMUL_SIZE[quick]
    sides = {
        "matmul": matmul_call(n), "AdamW (build_optimizer)": bare_step(model, batch, steps),
        "AdamW fused": fused_adamw_step(fused_model, batch, steps),
    }
    t = interleaved(sides, warmup=warmup, repeats=repeats)
    peak = 2 * n**3 / t["matmul"].median
    flops = flops_per_token(model, shape.seq_len)
    result = {"shape": shape, "peak": peak, "flops_per_token": flops.training, "rows": []}
    for name in ("AdamW (build_optimizer)", "AdamW fused"):
        tps = steps * shape.tokens / t[name].median
        result["rows"].append((name, tps, flops.training * tps, flops.training * tps / peak))
    result["profile"] = top_ops(bare_step(model, batch, 1))
    return result


def run(quick: bool = False) -> Section:
    results = [measure_shape(shape, quick) for shape in SHAPES[quick]]
    rows = []
    for r in results:
        for name, tps, achieved, mfu in r["rows"]:
            rows.append([
                r["shape"].describe(), name, f"{r['flops_per_token'] / 1e6:,.1f}", f"{tps:,.0f}",
                f"{achieved / 1e9:,.1f}", f"{r['peak'] / 1e9:,.1f}", f"{mfu:.1%}",
            ])
    headers = ["model (shape)", "optimizer", "train MFLOP/token", "tok/s", "achieved GFLOP/s",
               "peak matmul GFLOP/s (fp32)", "MFU"]
    n = MATMUL_SIZE[quick]
    notes = [
        f"Peak: median time of a {n}x{n} fp32 `torch.mm` (2n^3 FLOPs), interleaved with the training steps "
        "so both see the same load. FLOPs/token: `zoo.inspection.flops_per_token(model, T).training` "
        "(6 N_matmul + 12 n_attn T d_attn, the tied head counted, norms/softmax/optimizer not).",
        "Fused AdamW is the improvement the profile points at (below): the default CPU AdamW walks the "
        "parameters one tensor at a time with ~10 separate elementwise kernels per tensor. train.py keeps "
        "the default AdamW: Lightning refuses gradient clipping with a fused optimizer under mixed precision "
        "(it unscales gradients inside the kernel), and on a quiet CPU the gain is 3-5% of a step.",
    ]
    for r in results:
        notes.append(f"Top ops of one {r['shape'].describe()} training step "
                     "(`AdamW` from `build_optimizer`):\n\n"
                     + _indent(top_ops_table(r["profile"])))
    return Section("Model FLOP utilisation (fp32, CPU)", markdown_table(headers, rows), notes,
                   {"results": results})


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).markdown())
