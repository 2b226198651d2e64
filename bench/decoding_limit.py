"""Decoding tokens/s as a share of the machine's read bandwidth (issue 29), beside transformers' `generate`.

Per model and batch, three sides on the same weights, interleaved: HF `generate`, zoo's default
`model.generate` (dynamic cache, eager) and zoo's `compile=True` (static cache, one compiled step). Bytes per
step = the weights a step reads (every matrix, bias and norm; embedding tables only where the head reads them)
+ the K/V cache it attends over (average over the run). Share = steps/s x bytes per step / the read limit
measured on a buffer of the model's weight size (bench/bandwidth.py)."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

import zoo
from bench.bandwidth import GIB, fastest_threads, limit, read_bandwidth
from bench.common import interleaved, markdown_table
from bench.decode_breakdown import breakdown, columns

MODELS = ("gpt_small", "gpt2 d384x6", "llama_small")
SIZES = {
    # new tokens per batch: 128 at batch 1 (the run), fewer at larger batches to fit in minutes
    False: dict(batches={1: 128, 8: 64, 32: 32}, prompt=128, new=128, repeats=3, vocab=8192),
    True: dict(batches={1: 8, 2: 8}, prompt=8, new=8, repeats=1, vocab=128),
}
BEFORE = "The same breakdown before issue 29's changes (commit 673dd08) is in docs/decoding.md."
TINY = dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=None, d_ff=None)  # --quick: presets this small


def step_weight_bytes(model: nn.Module) -> int:
    """Bytes of the parameters one decode step reads: all of them, except embedding tables that are only
    looked up by row (a tied table is read whole by the head, so it counts)."""
    head = getattr(getattr(model, "head", None), "proj", None)
    head_weight = head.weight if head is not None else None
    looked_up = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    unique = {id(p): p for p in model.parameters()}
    return sum(p.numel() * p.element_size() for key, p in unique.items()
               if key not in looked_up or p is head_weight)


def kv_bytes(model, batch: int, positions: float) -> float:
    """Bytes of K and V a step attends over, for `positions` cached positions per row."""
    cfg = model.config
    return 2 * len(model.decoder_stack.layers) * batch * cfg.kv_heads * cfg.head_size * positions * 4


@dataclass
class Pair:
    """One model in zoo and in transformers with the same weights."""

    name: str
    ours: nn.Module
    hf: nn.Module


def _hf_from_zoo(ours) -> nn.Module:
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        zoo.save_pretrained(ours, tmp)
        hf = AutoModelForCausalLM.from_pretrained(tmp, attn_implementation="sdpa").eval()
    hf.generation_config.eos_token_id = None  # every step runs, as zoo's eos_token_id=[]
    hf.generation_config.pad_token_id = 0
    return hf


def build_pairs(size: dict, quick: bool, hf_gpt2) -> list[Pair]:
    """gpt_small and llama_small built in zoo and written to transformers; the GPT-2 shape built in
    transformers (`hf_gpt2`, the caller's) and read by zoo."""
    over = dict(dropout=0.0, vocab_size=size["vocab"], max_seq_len=size["prompt"] + size["new"])
    pairs = []
    for name in ("gpt_small", "llama_small"):
        torch.manual_seed(0)
        ours = zoo.build(name, **(over | (TINY if quick else {}))).eval()
        pairs.append(Pair(name, ours, _hf_from_zoo(ours)))
    hf = hf_gpt2()
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        ours = zoo.from_pretrained(tmp, dropout=0.0).eval()
    pairs.insert(1, Pair(MODELS[1], ours, hf))
    return pairs


def measure(pair: Pair, batch: int, size: dict) -> dict:
    """Interleaved tok/s of the three sides at one batch and whether their tokens agree with HF's."""
    new = size["batches"][batch]
    ids = torch.randint(3, size["vocab"], (batch, size["prompt"]),
                        generator=torch.Generator().manual_seed(batch))

    def hf_generate():
        with torch.inference_mode():
            return pair.hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                    min_new_tokens=new, do_sample=False)

    greedy = dict(max_new_tokens=new, eos_token_id=[])
    sides = {"HF generate": hf_generate,
             "zoo default": lambda: pair.ours.generate(ids, **greedy),
             "zoo compile=True": lambda: pair.ours.generate(ids, compile=True, **greedy)}
    outputs = {name: fn() for name, fn in sides.items()}  # the compile side's first call compiles
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    timings = interleaved({name: cpu_timed(fn, cpu[name]) for name, fn in sides.items()}, warmup=0,
                          repeats=size["repeats"])
    reference = outputs["HF generate"][:, -new:]
    agree = {name: float((out[:, -new:] == reference).float().mean()) for name, out in outputs.items()}
    return {"tok_s": {n: batch * new / t.median for n, t in timings.items()},
            "cpu_tok_s": {n: batch * new / statistics.median(s) for n, s in cpu.items()},
            "spread": {n: t.spread for n, t in timings.items()}, "agree": agree, "sides": sides}


def cpu_timed(fn: Callable[[], object], seconds: list[float]) -> Callable[[], object]:
    """`fn`, appending the process CPU time of each call to `seconds`: on a machine shared with other work
    the wall time also holds the time the scheduler gave to other processes; CPU time does not."""

    def run() -> object:
        start = time.process_time()
        out = fn()
        seconds.append(time.process_time() - start)
        return out

    return run


def run(quick: bool, hf_gpt2) -> tuple[str, list[str], dict, list[tuple[str, float, float]]]:
    """(markdown tables, notes, raw numbers, goals)."""
    size = SIZES[quick]
    load_before = os.getloadavg()[0]
    pairs = build_pairs(size, quick, hf_gpt2)
    threads, thread_rates = fastest_threads(step_weight_bytes(pairs[1].ours))  # every side runs at this count
    dram = read_bandwidth(GIB // (64 if quick else 1))
    data, parts, measured, rates = {}, [], [], {}
    for pair in pairs:
        weights = step_weight_bytes(pair.ours)
        rates.setdefault(weights, []).append(limit(weights))  # before this model's runs
        for batch in size["batches"]:
            result = measure(pair, batch, size)
            measured.append((pair, batch, result))
            if batch == 1 and pair.name == MODELS[1]:  # where the time goes, per token
                for side, fn in result["sides"].items():
                    ms = breakdown(fn, size["batches"][1])
                    parts.append([side] + [f"{ms.get(c, 0.0):.2f}" for c in columns()])
                    data[f"{pair.name} b1 {side} breakdown ms"] = ms
    for pair in pairs:  # and after every run: a load burst can cut one best-of-7 short; the limit is the best
        weights = step_weight_bytes(pair.ours)
        rates[weights].append(limit(weights))
    limits = {weights: max(found) for weights, found in rates.items()}
    rows, bw_rows, goals = [], [], []
    for pair in pairs:
        weights = step_weight_bytes(pair.ours)
        bw_rows.append([pair.name, f"{weights / 1e6:.1f}", f"{limits[weights]:.1f}",
                        ", ".join(f"{r:.1f}" for r in rates[weights])])
    for pair, batch, result in measured:
        weights = step_weight_bytes(pair.ours)
        pair_limit = limits[weights]
        cached = size["prompt"] + size["batches"][batch] / 2  # positions attended, averaged over the run
        step_bytes = weights + kv_bytes(pair.ours, batch, cached)
        hf_tps = result["tok_s"]["HF generate"]
        for side, tps in result["tok_s"].items():
            read = tps / batch * step_bytes / 1e9  # GB/s
            share = read / pair_limit
            cpu_tps = result["cpu_tok_s"][side]
            cpu_share = cpu_tps / batch * step_bytes / 1e9 / pair_limit
            rows.append([pair.name, batch, side, f"{tps:.1f}", f"{result['spread'][side]:.0%}",
                         f"{tps / hf_tps:.2f}x", f"{step_bytes / 1e6:.1f}", f"{read:.1f}", f"{share:.0%}",
                         f"{1e3 * batch / cpu_tps:.2f}", f"{cpu_share:.0%}",
                         "yes" if result["agree"][side] == 1.0 else f"{result['agree'][side]:.1%}"])
            data[f"{pair.name} b{batch} {side}"] = {"tok_s": tps, "share": share, "cpu_tok_s": cpu_tps,
                                                    "cpu_share": cpu_share}
        if batch == 1:
            share = data[f"{pair.name} b1 zoo compile=True"]["share"]
            if pair.name != "llama_small":
                goals.append((f"decoding b1 {pair.name}: zoo compile=True share of the read limit",
                              share, 0.5))
            goals.append((f"decoding b1 {pair.name}: zoo default / HF generate",
                          result["tok_s"]["zoo default"] / hf_tps, 2.0))
    table = markdown_table(["model", "batch", "side", "tok/s", "spread", "/ HF", "MB read per step",
                            "GB/s read", "share of limit", "CPU ms per step", "share at CPU time",
                            "same tokens as HF"], rows)
    bw_table = markdown_table(["model", "weights read per step (MB)", "read limit at that size (GB/s)",
                               "each measurement (GB/s)"], bw_rows)
    parts_table = markdown_table([f"{MODELS[1]}, batch 1, ms per token"] + columns(), parts)
    notes = [
        f"Threads: {threads} for every side, the count whose matrix-vector product read fastest just before "
        f"({', '.join(f'{t}: {r:.1f} GB/s' for t, r in thread_rates.items())}).",
        f"Read bandwidth (bench/bandwidth.py, best of 7, {threads} threads): at 1 GiB (main "
        f"memory) sum {dram['sum']:.1f} GB/s, matvec {dram['matvec']:.1f} GB/s; the limit per model is the "
        "faster of sum and matvec over a buffer of that model's weight size, which on this CPU (260 MiB L3) "
        "sits in cache: that is the rate a decode step could read its weights at, so the share is taken "
        "against it (against main memory the shares would look 2-4x better). It is measured before each "
        "model's runs and again after all of them, and the best of every measurement at that size is the "
        "limit (a load burst during one best-of-7 would otherwise overstate the shares).",
        f"Prompt {size['prompt']} + new tokens per batch "
        f"{', '.join(f'{b}: {n}' for b, n in size['batches'].items())}, greedy, every step run (no EOS); "
        f"random prompts; sides interleaved, median of {size['repeats']} after one untimed call each (the "
        "compile side's first call compiles; compile time is not in tok/s). MB read per step = weights + "
        "K/V over the average cached length. `same tokens as HF`: share of new tokens equal to HF's "
        "(random weights give near-uniform logits, where a last-bit difference can flip a near tie).",
        f"Load average (1 min) at start {load_before:.1f}, at end {os.getloadavg()[0]:.1f} (2 cores shared "
        "with other work: absolute numbers move with it, the interleaved ratios less).",
        "`CPU ms per step` and `share at CPU time`: the same calls timed in process CPU time (median), i.e. "
        "without the time the scheduler gave to other processes; at one thread that is the wall time the "
        "side would take on an otherwise idle core (the limit itself is a best-of-7 of short runs, which "
        "rarely lose the core). The goals are judged on wall time (`share of limit`).",
    ]
    notes.append("Per-token breakdown (bench/decode_breakdown.py): one warm `generate` of each side under "
                 "torch.profiler, op self-times grouped; `python + dispatch` is the wall time no op accounts "
                 "for. The profiler's own per-op cost inflates the eager sides most. " + BEFORE)
    return bw_table + "\n\n" + table + "\n\n" + parts_table, notes, data, goals
