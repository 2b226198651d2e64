"""Hybrid stacks against all-attention (issue 37 item 4), side by side in one run at equal parameters: an
all-attention decoder, a 3:1 Gated DeltaNet hybrid (`linear, linear, linear, full`, as Qwen3.5) and a
short-convolution hybrid (LFM2's pattern, `linear, linear, full` cycled). (1) Val loss after equal training
tokens, 3 seeds, the three models trained in lockstep on the same batches, each step timed (training
tokens/s); (2) decode tokens/s and cache bytes at 512 / 4k / 16k context: one prompt prefilled per model, then
`new` greedy steps through the cache, restored from a copy between interleaved repeats; the bytes are read off
the filled cache's tensors (K/V of the positions held, and every recurrent entry).

    python -m bench.run --sections hybrid
"""

from __future__ import annotations

import copy
import os
import statistics
import tempfile
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import zoo
from bench.common import Section, SelfTimed, interleaved, markdown_table
from zoo.tasks import build_data

FULL, LINEAR = "full", "linear"
SAME_SPEED = 0.1  # a speed ratio this close to 1 is called even: side-by-side ratios move ~10% between runs


@dataclass(frozen=True)
class Size:
    d_model: int
    n_layers: int
    d_ff: int  # the all-attention model's SwiGLU width; the hybrids' is set to match its parameter count
    vocab: int
    max_bytes: int
    seq_len: int
    batch: int
    steps: int
    val_batches: int
    seeds: tuple[int, ...]
    contexts: tuple[int, ...]
    new: int  # decode steps timed per repeat
    repeats: int
    lr: float = 3e-3


SIZES = {
    False: Size(d_model=64, n_layers=4, d_ff=172, vocab=512, max_bytes=1_000_000, seq_len=128, batch=4,
                steps=300, val_batches=8, seeds=(0, 1, 2), contexts=(512, 4096, 16384), new=32, repeats=3),
    True: Size(d_model=32, n_layers=4, d_ff=64, vocab=300, max_bytes=200_000, seq_len=16, batch=2, steps=3,
               val_batches=1, seeds=(0,), contexts=(16, 32), new=2, repeats=1),
}


def variants(s: Size) -> dict[str, dict]:
    """name -> the keys over llama_small's spine (RMSNorm, SwiGLU, RoPE on the attention layers, GQA 4 / 2
    heads): the mixers sized like the attention they replace (Gated DeltaNet 2 key / 4 value heads of
    d_model / 4, Qwen3.5's 1:2; LFM2's 3-tap convolution)."""
    head = s.d_model // 4
    gdn = {"name": "gated_deltanet", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
           "linear_key_head_dim": head, "linear_value_head_dim": head, "linear_conv_kernel_dim": 4,
           "chunk_size": 64}
    return {
        "attention": {},
        "Gated DeltaNet 3:1": {"linear_mixer": gdn, "layer_pattern": [LINEAR, LINEAR, LINEAR, FULL]},
        "short conv (LFM2)": {"linear_mixer": {"name": "short_conv", "conv_L_cache": 3},
                              "layer_pattern": [LINEAR, LINEAR, FULL]},
    }


def build(s: Size, keys: dict, d_ff: int, vocab_size: int, max_len: int) -> torch.nn.Module:
    return zoo.build("llama_small", d_model=s.d_model, n_layers=s.n_layers, n_heads=4, n_kv_heads=2,
                     d_ff=d_ff, vocab_size=vocab_size, max_seq_len=max_len, dropout=0.0, **keys)


def matched_widths(s: Size, vocab_size: int) -> dict[str, int]:
    """Each model's SwiGLU width: the attention model's, and for each hybrid the width whose total parameter
    count is nearest the attention model's (the count is linear in the width: two builds give the slope)."""

    def params(keys: dict, d_ff: int) -> int:
        with torch.device("meta"):  # shapes only: nothing allocated or initialised
            return build(s, keys, d_ff, vocab_size, 64).num_parameters()

    target, widths = params({}, s.d_ff), {}
    for name, keys in variants(s).items():
        here = params(keys, s.d_ff)
        widths[name] = s.d_ff + round((target - here) / (params(keys, s.d_ff + 1) - here))
    return widths


def cache_bytes(cache) -> tuple[int, int, int]:
    """(bytes the filled cache needs, bytes its tensors allocate, of which fixed-size state): every layer's
    K/V for the positions it holds (the buffer doubles as it fills, so allocation runs up to twice that) and
    every recurrent entry (convolution window, state: the same size at any length)."""
    held = allocated = fixed = 0
    for layer in cache.layers:
        for t in (layer.k, layer.v):
            if t is not None:
                held += t[:, :, : layer.length].nelement() * t.element_size()
                allocated += t.nelement() * t.element_size()
        fixed += sum(t.nelement() * t.element_size() for t in layer.state.values())
    return held + fixed, allocated + fixed, fixed


# ------------------------------------------------------------------------------------------- training
def _batches(s: Size, seed: int, cache_dir: str):
    tok, dm = build_data({"name": "stdlib_text", "max_bytes": s.max_bytes},
                         {"name": "bpe", "vocab_size": s.vocab}, task="lm", max_seq_len=s.seq_len,
                         batch_size=s.batch, cache_dir=cache_dir, seed=seed)
    dm.setup("fit")
    train, batches, epoch = dm.train_dataloader(), [], 0
    while len(batches) < s.steps:
        train.sampler.set_epoch(epoch)
        batches += list(train)
        epoch += 1
    val = [b for _, b in zip(range(s.val_batches), dm.val_dataloader(), strict=False)]
    return batches[: s.steps], val, tok.vocab_size


def _loss(model, batch) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"]).logits
    return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=-100)


def lockstep(models: dict[str, torch.nn.Module], train, val, lr: float) -> dict[str, dict]:
    """Train `models` (built from one seed) in lockstep on the same batches, the order rotating each step so
    the neighbours' load falls on each alike; AdamW (0.9, 0.95), weight decay 0.1, clipping at 1. Each model's
    val loss, step seconds, tokens/s, parameters and tokens seen."""
    optimizers = {name: torch.optim.AdamW(m.train().parameters(), lr=lr, weight_decay=0.1, betas=(0.9, 0.95))
                  for name, m in models.items()}
    names, seconds, tokens = list(models), dict.fromkeys(models, 0.0), 0
    for i, batch in enumerate(train):
        tokens += int((batch["targets"] != -100).sum())
        for name in names[i % len(names):] + names[: i % len(names)]:
            start = time.perf_counter()
            _loss(models[name], batch).backward()
            torch.nn.utils.clip_grad_norm_(models[name].parameters(), 1.0)
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
            seconds[name] += time.perf_counter() - start
    out = {}
    for name, model in models.items():
        model.eval()
        with torch.no_grad():
            val_loss = statistics.fmean(float(_loss(model, b)) for b in val)
        out[name] = {"val": val_loss, "seconds": seconds[name], "tok_s": tokens / seconds[name],
                     "params": model.num_parameters(), "tokens": tokens}
    return out


def train_seed(s: Size, seed: int, cache_dir: str) -> dict[str, dict]:
    """The three models from one seed, stepped in lockstep (`lockstep`): val loss, step seconds, tokens seen,
    parameters."""
    train, val, vocab_size = _batches(s, seed, cache_dir)
    widths = matched_widths(s, vocab_size)
    models = {}
    for name, keys in variants(s).items():
        torch.manual_seed(seed)
        models[name] = build(s, keys, widths[name], vocab_size, s.seq_len)
    out = lockstep(models, train, val, s.lr)
    for name in out:
        out[name].update(d_ff=widths[name], vocab_size=vocab_size)
    return out


# ------------------------------------------------------------------------------------------- decoding
@torch.inference_mode()
def prefill(model, prompt: torch.Tensor):
    """(the filled cache, the first greedy token (1, 1), seconds)."""
    cache, start = model.new_cache(), time.perf_counter()
    logits = model(prompt, cache=cache, logits_to_keep=1).logits[:, -1]
    return cache, logits.argmax(-1, keepdim=True), time.perf_counter() - start


@torch.inference_mode()
def decode(model, cache, first: torch.Tensor, new: int) -> list[int]:
    """`new` greedy tokens after `first` through `cache` (which they extend)."""
    token, tokens = first, []
    for _ in range(new):
        token = model(token, cache=cache, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(int(token))
    return tokens


def _timed_from(model, filled, first: torch.Tensor, new: int):
    """A side for `interleaved`: decode from a fresh copy of the prefilled cache (plain decoding keeps no
    past recurrent states for `crop` to put back), timing only the steps."""

    def side() -> SelfTimed:
        cache = copy.deepcopy(filled)
        start = time.perf_counter()
        decode(model, cache, first, new)
        return SelfTimed(time.perf_counter() - start)

    return side


def decoding(s: Size, widths: dict[str, int], vocab_size: int) -> dict[int, dict[str, dict]]:
    """context -> model -> tokens/s, cache bytes (held, allocated, fixed), prefill seconds (one run); the
    trained models' shapes (`widths`), random weights."""
    models = {}
    for name, keys in variants(s).items():
        torch.manual_seed(0)
        models[name] = build(s, keys, widths[name], vocab_size, max(s.contexts) + s.new + 1).eval()
    results = {}
    for context in s.contexts:
        prompt = torch.randint(3, vocab_size, (1, context), generator=torch.Generator().manual_seed(context))
        filled = {name: prefill(model, prompt) for name, model in models.items()}
        timings = interleaved({name: _timed_from(model, filled[name][0], filled[name][1], s.new)
                               for name, model in models.items()}, warmup=1, repeats=s.repeats)
        results[context] = {name: {"tok_s": s.new / timings[name].median,
                                   "bytes": cache_bytes(filled[name][0]), "prefill_s": filled[name][2]}
                            for name in models}
    return results


# ------------------------------------------------------------------------------------------- the section
def _mean_sd(values: list[float], fmt: str) -> str:
    mean = statistics.fmean(values)
    return f"{mean:{fmt}} ± {statistics.stdev(values):{fmt}}" if len(values) > 1 else f"{mean:{fmt}}"


def _size(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _speed_ratios(trained: dict[str, list[dict]], name: str) -> list[float]:
    """Training tokens/s over attention's, per seed (the models of a seed stepped in lockstep)."""
    return [r["tok_s"] / a["tok_s"] for r, a in zip(trained[name], trained["attention"], strict=True)]


def verdict(name: str, trained: dict[str, list[dict]], decoded: dict[int, dict[str, dict]]) -> str:
    """One plain sentence of where hybrid `name` wins and loses against attention, from the measured numbers:
    val loss (a gap within the larger seed spread is no difference), training and decode speed (a ratio
    within SAME_SPEED of 1 is even: ratios move that much between runs here), cache."""
    base, ours = ([r["val"] for r in trained[k]] for k in ("attention", name))
    spread = max((statistics.stdev(v) for v in (base, ours) if len(v) > 1), default=0.0)
    gap = statistics.fmean(ours) - statistics.fmean(base)
    wins, loses, even = [], [], []
    if abs(gap) <= spread:
        even.append(f"val loss within the seed spread (± {spread:.3f}) of attention's")
    else:
        (wins if gap < 0 else loses).append(
            f"val loss {'lower' if gap < 0 else 'higher'} than attention's by {abs(gap):.3f}")
    speeds = [("trains at", statistics.fmean(_speed_ratios(trained, name)), "")]
    speeds += [("decodes at", row[name]["tok_s"] / row["attention"]["tok_s"], f" at {context:,}")
               for context, row in decoded.items()]
    for what, ratio, where in speeds:
        side = even if abs(ratio - 1) <= SAME_SPEED else wins if ratio > 1 else loses
        side.append(f"{what} {ratio:.2f}x attention's tokens/s{where}")
    last = decoded[max(decoded)]
    cache = last["attention"]["bytes"][0] / last[name]["bytes"][0]
    (wins if cache > 1 else loses).append(f"holds {cache:.1f}x less cache at {max(decoded):,}")
    return (f"**{name}** wins: {'; '.join(wins) or 'nothing'}. Loses: {'; '.join(loses) or 'nothing'}."
            + (f" Even: {'; '.join(even)}." if even else ""))


def cache_note(s: Size, decoded: dict[int, dict[str, dict]]) -> str:
    """What the cache column shows: each hybrid's fixed entries, and the limit its attention layers set."""
    longest = max(decoded)
    parts = []
    for name, keys in variants(s).items():
        if keys:
            pattern = keys["layer_pattern"]
            full = sum(pattern[i % len(pattern)] == FULL for i in range(s.n_layers))
            m = decoded[longest][name]
            ratio = decoded[longest]["attention"]["bytes"][0] / m["bytes"][0]
            parts.append(f"{name}: {_size(m['bytes'][2])} of fixed entries at every context, and K/V on "
                         f"{full} attention layer(s) of {s.n_layers}, so at most {s.n_layers / full:.1f}x "
                         f"less cache than attention however long the context ({ratio:.2f}x at {longest:,})")
    return "Cache: " + "; ".join(parts) + "."


def run(quick: bool = False) -> Section:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the loaded 2-core machine: one thread is steadier (every side alike)
    load_start = os.getloadavg()[0]
    try:
        s = SIZES[quick]
        trained: dict[str, list[dict]] = {name: [] for name in variants(s)}
        with tempfile.TemporaryDirectory() as cache_dir:
            for seed in s.seeds:
                for name, result in train_seed(s, seed, cache_dir).items():
                    trained[name].append(result)
        decoded = decoding(s, {name: runs[0]["d_ff"] for name, runs in trained.items()},
                           trained["attention"][0]["vocab_size"])
    finally:
        torch.set_num_threads(threads)
    load_end = os.getloadavg()[0]
    return section(s, trained, decoded, (load_start, load_end))


def section(s: Size, trained: dict[str, list[dict]], decoded: dict[int, dict[str, dict]],
            load: tuple[float, float]) -> Section:
    train_rows = [[name, f"{runs[0]['params']:,}", runs[0]["d_ff"],
                   _mean_sd([r["val"] for r in runs], ".3f"), _mean_sd([r["tok_s"] for r in runs], ".0f"),
                   _mean_sd(_speed_ratios(trained, name), ".2f") + "x"]
                  for name, runs in trained.items()]
    decode_rows = []
    for context, row in decoded.items():
        for name, m in row.items():
            decode_rows.append([f"{context:,}", name, f"{m['tok_s']:.0f}",
                                f"{m['tok_s'] / row['attention']['tok_s']:.2f}x", _size(m["bytes"][0]),
                                f"{row['attention']['bytes'][0] / m['bytes'][0]:.1f}x", _size(m["bytes"][2]),
                                _size(m["bytes"][1]),
                                f"{m['prefill_s']:.2f}"])
    seeds = f"{len(s.seeds)} seed{'s' * (len(s.seeds) > 1)}"
    tables = (markdown_table(["model", "parameters", "SwiGLU width", f"val loss ({seeds})",
                              "train tokens/s", "vs attention (per seed)"], train_rows) + "\n\n" +
              markdown_table(["context", "model", "decode tok/s", "vs attention", "cache held",
                              "attention / this", "of which fixed", "cache allocated", "prefill s (1 run)"],
                             decode_rows))
    names = list(trained)
    tokens = trained["attention"][0]["tokens"]
    layers = {name: ", ".join(v["layer_pattern"][i % len(v["layer_pattern"])] for i in range(s.n_layers))
              for name, v in variants(s).items() if v}
    notes = [
        f"Models: llama_small's spine at d_model {s.d_model}, {s.n_layers} layers; attention: 4 query / 2 KV "
        f"heads of {s.d_model // 4} with RoPE; RMSNorm, SwiGLU, untied head, bpe vocab {s.vocab}. Gated "
        f"DeltaNet 3:1 (Qwen3.5's pattern): {layers[names[1]]} (2 key / 4 value heads of {s.d_model // 4}, "
        f"a 4-tap convolution, chunk 64); short conv (LFM2's `linear, linear, full`, cycled): "
        f"{layers[names[2]]} (LFM2's 3-tap gated convolution); `full` is attention.",
        "Equal parameters: the linear mixers hold more parameters than the GQA attention they replace, so "
        "each hybrid's SwiGLU width is lowered to the width whose total count (embeddings and head "
        "included) is nearest the attention model's ('SwiGLU width'); the counts differ by under one "
        f"width step ({3 * s.d_model * s.n_layers} parameters).",
        f"Training: data=stdlib_text (first {s.max_bytes:,} bytes), T={s.seq_len}, batch {s.batch}, "
        f"{s.steps} AdamW steps (lr {s.lr} for all three, not tuned per model; clip 1.0): {tokens:,} target "
        f"tokens per model and seed; seeds {', '.join(map(str, s.seeds))} (each its own batch order and "
        "initialisation, the same for the three models); val loss = mean over "
        f"{s.val_batches} fixed validation batches. The three models step in lockstep (the order rotates "
        "every step); tokens/s = tokens / the model's own step seconds (forward, backward, clip, AdamW). "
        "Tiny models after few tokens: which mixer learns fastest here says nothing of larger scales.",
        f"Decode: batch 1, random weights, one prompt of the context's length prefilled once per model, "
        f"then {s.new} greedy steps through zoo's dynamic cache, from a copy of the prefilled cache each "
        "repeat (plain decoding keeps no past recurrent states to crop back to); tokens/s = the median of "
        f"{s.repeats} interleaved repeats. 'cache held' is read off the filled cache's tensors: K/V of the "
        "positions held on the attention layers plus each linear layer's convolution window and recurrent "
        "state; 'allocated' adds the unused part of attention's doubling buffer. Prefill: one run per "
        "model. At this size a decode step is a few ms of small ops for each model: a Gated DeltaNet layer "
        "runs more of them per token than an attention layer (convolution, L2 norms, gates, the state "
        "update), while attention's cost grows with the K/V it reads, so the order turns with the context.",
        f"Everything fp32, eager, 1 torch thread, on the 2-core CPU shared with other engineers' tests: load "
        f"average {load[0]:.1f} at the start, {load[1]:.1f} at the end. Absolute numbers move with the "
        "neighbours; read the ratios, which were measured side by side.",
    ] + [cache_note(s, decoded)] + [verdict(name, trained, decoded) for name in names[1:]]
    return Section("Hybrids: attention vs Gated DeltaNet 3:1 vs short conv (LFM2)", tables, notes,
                   data={"trained": trained, "decoded": {str(k): v for k, v in decoded.items()}})
