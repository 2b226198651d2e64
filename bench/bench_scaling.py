"""Scaling: training tokens/s and peak memory as `max_seq_len` and `d_model` double, against the closed-form
FLOPs per token (how cost should grow). Steps of every size are interleaved in one timing loop; peak
memory is the high-water resident set of a fresh subprocess running two steps, above its RSS after
imports (so one size's freed memory cannot hide the next size's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

import zoo
from bench.bench_training import bare_step, random_batch
from bench.common import Section, interleaved, markdown_table
from zoo.inspection import flops_per_token

BASES = {  # a 2-layer gpt_small; T and d_model double from here
    False: {"preset": "gpt_small", "n_layers": 2, "n_heads": 4, "batch": 2, "seq_len": 64, "d_model": 128,
            "doublings": 2},
    True: {"preset": "gpt_small", "n_layers": 1, "n_heads": 2, "batch": 2, "seq_len": 16, "d_model": 32,
           "doublings": 1, "vocab_size": 256},
}


def points(base: dict) -> list[tuple[str, int, int]]:
    """(axis, T, d_model) for the base and each doubling along each axis; the base appears once."""
    t, d, n = base["seq_len"], base["d_model"], base["doublings"]
    out = [("base", t, d)]
    out += [("max_seq_len", t * 2**k, d) for k in range(1, n + 1)]
    out += [("d_model", t, d * 2**k) for k in range(1, n + 1)]
    return out


def build(base: dict, seq_len: int, d_model: int):
    overrides = {"n_layers": base["n_layers"], "n_heads": base["n_heads"], "d_model": d_model,
                 "max_seq_len": seq_len}
    if "vocab_size" in base:
        overrides["vocab_size"] = base["vocab_size"]
    torch.manual_seed(0)
    model = zoo.build(base["preset"], **overrides)
    return model, random_batch(model.config, base["batch"], seq_len)


def _rss_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise OSError(f"{field} not in /proc/self/status")


def child(spec: dict) -> dict:
    """Run in a fresh process: peak RSS growth (MB) over two training steps of one size. A throwaway
    tiny step first loads the runtime's lazy parts (kernels, autograd threads), then the high-water mark
    is reset to the current RSS (Linux `clear_refs`)."""
    warm_model, warm_batch = build({**spec["base"], "vocab_size": 64, "n_layers": 1}, 8,
                                   8 * spec["base"]["n_heads"])
    bare_step(warm_model, warm_batch)()
    del warm_model, warm_batch
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    baseline = _rss_mb("VmRSS:")
    model, batch = build(spec["base"], spec["seq_len"], spec["d_model"])
    bare_step(model, batch, steps=2)()
    return {"peak_mb": _rss_mb("VmHWM:") - baseline}


def peak_memory_mb(base: dict, seq_len: int, d_model: int) -> float | None:
    """Peak memory of one size, measured in a subprocess; None where /proc is unavailable (not Linux)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    spec = json.dumps({"base": base, "seq_len": seq_len, "d_model": d_model})
    code = (f"import json, torch; torch.set_num_threads({torch.get_num_threads()}); "
            "from bench.bench_scaling import child; ")
    code += f"print(json.dumps(child(json.loads({spec!r}))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"peak-memory subprocess failed for T={seq_len}, "
                           f"d_model={d_model}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_mb"]


def run(quick: bool = False) -> Section:
    base = BASES[quick]
    warmup, repeats = (1, 2) if quick else (1, 4)
    grid = points(base)
    sides, models = {}, {}
    for _, t, d in grid:
        model, batch = build(base, t, d)
        models[(t, d)] = model
        sides[(t, d)] = bare_step(model, batch)
    timings = interleaved(sides, warmup=warmup, repeats=repeats)
    b = base["batch"]
    ref_t, ref_d = base["seq_len"], base["d_model"]
    ref_sec_per_tok = timings[(ref_t, ref_d)].median / (b * ref_t)
    ref_flops = flops_per_token(models[(ref_t, ref_d)], ref_t).training
    ref_mem = None
    rows = []
    for axis, t, d in grid:
        model = models[(t, d)]
        sec_per_tok = timings[(t, d)].median / (b * t)
        flops = flops_per_token(model, t).training
        mem = peak_memory_mb(base, t, d) if not quick or axis == "base" else None
        ref_mem = mem if axis == "base" else ref_mem
        states_mb = 16 * model.num_parameters() / 2**20  # fp32 weights + grads + AdamW's two moments
        rows.append([
            axis, t, d, f"{model.num_parameters() / 1e6:.1f}M", f"{1 / sec_per_tok:,.0f}",
            f"{sec_per_tok / ref_sec_per_tok:.2f}x", f"{flops / ref_flops:.2f}x",
            "n/a" if mem is None else f"{mem:,.0f}", f"{states_mb:,.0f}",
            "n/a" if mem is None or not ref_mem else f"{mem / ref_mem:.2f}x",
        ])
    headers = ["doubled", "T", "d_model", "params", "tok/s", "time/token vs base", "FLOPs/token vs base",
               "peak MB", "of which states MB", "peak vs base"]
    notes = [
        f"`{base['preset']}` with n_layers={base['n_layers']}, n_heads={base['n_heads']}, B={base['batch']}, "
        "fp32, one training step (forward, backward, AdamW) per timed call; all sizes interleaved, median of "
        f"{repeats} repeats.",
        "FLOPs/token = `flops_per_token(model, T).training`: doubling T doubles only the attention term "
        "(12 n_layers T d per token), doubling d_model ~quadruples the block matmuls (12 d^2 per layer) and "
        "doubles the head (d x vocab).",
        "Peak MB: high-water RSS of a fresh subprocess over two steps, above its RSS after imports; 'states' "
        "= 16 bytes/parameter (weights, grads, two AdamW moments); the rest is activations and workspace.",
    ]
    if quick:
        notes.append("--quick measures peak memory of the base size only (n/a elsewhere).")
    return Section("Scaling: doubling max_seq_len and d_model", markdown_table(headers, rows), notes)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).markdown())
