"""Multi-head Latent Attention's latent KV cache (issue 36 item 2): what decoding caches per token and layer,
and decode speed at a long context, `model.mixer.cache=latent` (the latent and the shared rope key; kv_b
folded into query and output) against `materialised` (each head's keys and values, as transformers caches
them), the same weights, side by side in one run.

Two shapes: `mla_small` (d_model 256, 8 heads of nope 32 / rope 16 / value 32, latent 64, 4 layers) and the
attention of DeepSeek-V2-Lite (d_model 2048, 16 heads of 128 / 64 / 128, latent 512) in 2 layers with a small
FFN and vocabulary, random weights. For each context (1k and 4k tokens) one prompt of that length is
prefilled once per side, then `new` greedy tokens are decoded one forward at a time through the model's
cache, which is cropped back to the prompt between repeats; the bytes are read off the filled caches. A GQA
model (llama_small: 8 query heads, 2 key/value heads of 32) gives the cache bytes of the usual alternative.

Val loss of MLA against GQA at equal parameters and tokens (`TRAIN`): an mla_small-like and a llama_small-like
decoder of the same width, depth and heads, MLA's SwiGLU width set so that its total parameter count is the
nearest to GQA's; both trained in lockstep on the same batches of the built-in corpus (bench_hybrid's data and
loss), 3 seeds, and a sentence saying which is lower and whether the gap exceeds the seed spread.

    python -m bench.run --sections mla
"""

from __future__ import annotations

import os
import statistics
import tempfile
from dataclasses import dataclass

import torch

import zoo
from bench.bench_hybrid import _batches, _mean_sd, lockstep
from bench.common import Section, interleaved, markdown_table

SHAPES = {
    "mla_small": dict(preset="mla_small", keys={}),
    "DeepSeek-V2-Lite attention, 2 layers": dict(preset="mla_small", keys=dict(
        d_model=2048, n_heads=16, n_layers=2, d_ff=512, vocab_size=1024,
        mixer={"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128})),
}
SIZES = {
    False: dict(contexts=(1024, 4096), new=32, repeats=3, shapes=tuple(SHAPES)),
    True: dict(contexts=(32, 64), new=4, repeats=1, shapes=("mla_small",)),
}
QUICK_KEYS = dict(d_model=32, n_heads=4, n_layers=2, d_ff=48, vocab_size=64,
                  mixer={"kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6})


@dataclass(frozen=True)
class Train:
    """The val-loss comparison's sizes: the shared spine, MLA's per-head sizes, the data and the steps."""

    d_model: int
    n_layers: int
    n_heads: int  # MLA's heads and GQA's query heads
    kv_heads: int  # GQA's key/value heads
    d_ff: int  # GQA's SwiGLU width; MLA's is matched to GQA's total count
    mla: dict  # model.mixer keys of the MLA model
    vocab: int
    max_bytes: int
    seq_len: int
    batch: int
    steps: int
    val_batches: int
    seeds: tuple[int, ...]
    lr: float = 3e-3  # the names bench_hybrid's _batches reads are Size's


TRAIN = {
    False: Train(d_model=64, n_layers=4, n_heads=4, kv_heads=2, d_ff=172,
                 mla={"kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16},
                 vocab=512, max_bytes=1_000_000, seq_len=128, batch=4, steps=300, val_batches=8,
                 seeds=(0, 1, 2)),
    True: Train(d_model=32, n_layers=2, n_heads=4, kv_heads=2, d_ff=64,
                mla={"kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8},
                vocab=300, max_bytes=200_000, seq_len=16, batch=2, steps=3, val_batches=1, seeds=(0, 1)),
}
MODELS = ("MLA", "GQA")


def build_trained(t: Train, name: str, d_ff: int, vocab_size: int) -> torch.nn.Module:
    """The comparison's two models: mla_small's spine (RoPE interleaved, full-rank query) or llama_small's
    (GQA, RoPE half), at `t`'s width, depth and heads; no dropout."""
    spine = dict(d_model=t.d_model, n_layers=t.n_layers, n_heads=t.n_heads, d_ff=d_ff, vocab_size=vocab_size,
                 max_seq_len=t.seq_len, dropout=0.0)
    if name == "MLA":
        return zoo.build("mla_small", **spine, mixer=t.mla)
    return zoo.build("llama_small", **spine, n_kv_heads=t.kv_heads)


def matched_widths(t: Train, vocab_size: int) -> dict[str, int]:
    """GQA's SwiGLU width, and MLA's: the width whose total count is nearest GQA's (linear in the width)."""

    def params(name: str, d_ff: int) -> int:
        with torch.device("meta"):
            return build_trained(t, name, d_ff, vocab_size).num_parameters()

    target, here = params("GQA", t.d_ff), params("MLA", t.d_ff)
    return {"MLA": t.d_ff + round((target - here) / (params("MLA", t.d_ff + 1) - here)), "GQA": t.d_ff}


def train_seed(t: Train, seed: int, cache_dir: str) -> dict[str, dict]:
    """Both models from one seed, stepped in lockstep on the same batches (bench_hybrid.lockstep): val loss,
    step seconds, tokens seen, parameters, attention parameters, SwiGLU width."""
    train, val, vocab_size = _batches(t, seed, cache_dir)
    widths = matched_widths(t, vocab_size)
    models = {}
    for name in MODELS:
        torch.manual_seed(seed)
        models[name] = build_trained(t, name, widths[name], vocab_size)
    out = lockstep(models, train, val, t.lr)
    for name, model in models.items():
        out[name].update(attention=_attention_parameters(model), d_ff=widths[name])
    return out


def verdict(trained: dict[str, list[dict]]) -> str:
    """Which model's mean val loss is lower, by how much, and whether that exceeds the seed noise: the larger
    of the two models' seed standard deviations, and the spread of the per-seed paired differences."""
    mla, gqa = ([r["val"] for r in trained[name]] for name in MODELS)
    gap = statistics.fmean(mla) - statistics.fmean(gqa)
    noise = max((statistics.stdev(v) for v in (mla, gqa) if len(v) > 1), default=0.0)
    paired = [a - b for a, b in zip(mla, gqa, strict=True)]
    better, worse = ("MLA", "GQA") if gap < 0 else ("GQA", "MLA")
    same_sign = all(d < 0 for d in paired) or all(d > 0 for d in paired)
    exceeds = abs(gap) > noise
    return (f"**{better if gap else 'Neither'}** has the lower val loss: MLA {statistics.fmean(mla):.3f}, "
            f"GQA {statistics.fmean(gqa):.3f}, a gap of {abs(gap):.3f} in {better}'s favour over {worse}; "
            f"the larger seed standard deviation is {noise:.3f}, so the gap "
            f"{'exceeds' if exceeds else 'does not exceed'} seed noise. Per seed (MLA - GQA, same batches "
            f"and seed): {', '.join(f'{d:+.3f}' for d in paired)}"
            f"{' (one sign on every seed)' if same_sign and len(paired) > 1 else ''}.")


def training(quick: bool) -> tuple[str, list[str], dict]:
    """The val-loss table, its notes and raw numbers."""
    t = TRAIN[quick]
    trained: dict[str, list[dict]] = {name: [] for name in MODELS}
    with tempfile.TemporaryDirectory() as cache_dir:
        for seed in t.seeds:
            for name, result in train_seed(t, seed, cache_dir).items():
                trained[name].append(result)
    rows = [[name, f"{runs[0]['params']:,}", f"{runs[0]['attention']:,}", runs[0]["d_ff"],
             _mean_sd([r["val"] for r in runs], ".3f"), _mean_sd([r["tok_s"] for r in runs], ".0f")]
            for name, runs in trained.items()]
    table = markdown_table(["model", "parameters", "attention parameters", "SwiGLU width",
                            f"val loss ({len(t.seeds)} seeds, mean ± sd)", "train tokens/s"], rows)
    m = t.mla
    notes = [
        f"Val loss at equal parameters and tokens: both decoders d_model {t.d_model}, {t.n_layers} layers, "
        f"{t.n_heads} heads, RMSNorm pre-norm, SwiGLU, RoPE, untied head, bpe vocab {t.vocab}. MLA "
        f"(mla_small's spine): full-rank query, latent {m['kv_lora_rank']}, nope / rope / value "
        f"{m['qk_nope_head_dim']} / {m['qk_rope_head_dim']} / {m['v_head_dim']} per head; GQA "
        f"(llama_small's): {t.n_heads} query / {t.kv_heads} key-value heads of {t.d_model // t.n_heads}. "
        "Equal parameters: MLA's attention holds more, so its SwiGLU width is lowered to the width whose "
        "total count (embeddings and head included) is nearest GQA's (they differ by under one width step, "
        f"{3 * t.d_model * t.n_layers} parameters).",
        f"Training: data=stdlib_text (first {t.max_bytes:,} bytes), T={t.seq_len}, batch {t.batch}, "
        f"{t.steps} AdamW steps (lr {t.lr}, clip 1.0): {trained['GQA'][0]['tokens']:,} target tokens per "
        f"model and seed; seeds {', '.join(map(str, t.seeds))} (each its own batch order and initialisation, "
        f"the same for both models); val loss = mean over {t.val_batches} fixed validation batches; the two "
        "step in lockstep (the order alternates), tokens/s = tokens / the model's own step seconds; fp32, "
        "eager, 1 thread.",
        verdict(trained),
    ]
    return table, notes, {"trained": trained}


def cache_bytes_per_token(cache) -> int:
    """Bytes the filled `cache` holds per position, every layer's keys and values (or latent) together."""
    total = sum(t[:, :, : layer.length].nelement() * t.element_size()
                for layer in cache.layers for t in (layer.k, layer.v))
    return total // (cache.length * cache.layers[0].k.shape[0])


def pair(preset: str, keys: dict, max_len: int):
    """The same random weights as cache=latent and cache=materialised (eval mode)."""
    mixer = dict(keys.get("mixer", {}))
    other = {k: v for k, v in keys.items() if k != "mixer"}
    models = []
    for mode in ("latent", "materialised"):
        torch.manual_seed(0)
        models.append(zoo.build(preset, **other, max_seq_len=max_len, mixer={**mixer, "cache": mode}).eval())
    models[1].load_state_dict(models[0].state_dict())
    return models


@torch.inference_mode()
def prefill(model, prompt: torch.Tensor):
    cache = model.new_cache()
    logits = model(prompt, cache=cache, logits_to_keep=1).logits[:, -1]
    return cache, logits


@torch.inference_mode()
def decode(model, cache, first: torch.Tensor, new: int) -> tuple[list[int], list[torch.Tensor]]:
    """`new` greedy tokens after `first` (1, 1) through `cache`, which is cropped back afterwards."""
    start, token, tokens, logits = cache.length, first, [], []
    for _ in range(new):
        step = model(token, cache=cache, logits_to_keep=1).logits[:, -1]
        token = step.argmax(-1, keepdim=True)
        tokens.append(int(token))
        logits.append(step)
    cache.crop(start)
    return tokens, logits


def measure(latent, materialised, context: int, new: int, repeats: int) -> dict:
    """Prefill one prompt of `context` tokens per side, then time `new` greedy decode steps, interleaved."""
    seed = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, latent.config.vocab_size, (1, context), generator=seed)
    (cache_l, first), (cache_m, _) = prefill(latent, prompt), prefill(materialised, prompt)
    first = first.argmax(-1, keepdim=True)
    tokens_l, logits_l = decode(latent, cache_l, first, new)
    tokens_m, logits_m = decode(materialised, cache_m, first, new)
    timings = interleaved({"latent": lambda: decode(latent, cache_l, first, new),
                           "materialised": lambda: decode(materialised, cache_m, first, new)},
                          warmup=1, repeats=repeats)
    error = max(float((a - b).abs().max()) for a, b in zip(logits_l, logits_m, strict=True))
    return dict(bytes_latent=cache_bytes_per_token(cache_l),
                bytes_materialised=cache_bytes_per_token(cache_m),
                tokens_per_s_latent=new / timings["latent"].median,
                tokens_per_s_materialised=new / timings["materialised"].median,
                same_tokens=tokens_l == tokens_m, max_logit_error=error)


def _row(shape: str, context: int, m: dict) -> list[str]:
    ratio = m["bytes_materialised"] / m["bytes_latent"]
    speed = m["tokens_per_s_latent"] / m["tokens_per_s_materialised"]
    return [shape, f"{context:,}", f"{m['bytes_latent']:,}", f"{m['bytes_materialised']:,}", f"{ratio:.1f}x",
            f"{m['tokens_per_s_latent']:.1f}", f"{m['tokens_per_s_materialised']:.1f}", f"{speed:.2f}",
            "yes" if m["same_tokens"] else "NO", f"{m['max_logit_error']:.1e}"]


def _attention_parameters(model) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if ".self_attn." in n)


def run(quick: bool = False) -> Section:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see the note: on this shared machine one thread is the steady measurement
    try:
        return _run(quick)
    finally:
        torch.set_num_threads(threads)


def _run(quick: bool) -> Section:
    size = SIZES[quick]
    rows, notes, data = [], [], {}
    for shape in size["shapes"]:
        keys = QUICK_KEYS if quick else SHAPES[shape]["keys"]
        latent, materialised = pair(SHAPES[shape]["preset"], keys, max(size["contexts"]) + size["new"] + 1)
        for context in size["contexts"]:
            m = data[f"{shape}/{context}"] = measure(latent, materialised, context, size["new"],
                                                     size["repeats"])
            rows.append(_row(shape, context, m))
    small = {k: v for k, v in QUICK_KEYS.items() if k != "mixer"} if quick else {}
    gqa = zoo.build("llama_small", **small, n_kv_heads=2).eval()
    gqa_cache, _ = prefill(gqa, torch.randint(3, gqa.config.vocab_size, (1, 16)))
    attention = _attention_parameters(gqa)
    mla_attention = _attention_parameters(pair("mla_small", QUICK_KEYS if quick else {}, 64)[0])
    g = gqa.config
    notes.append(f"For comparison, GQA (llama_small: {g.n_heads} query heads, {g.kv_heads} key/value heads "
                 f"of {g.head_size}, {g.n_layers} layers) caches "
                 f"{cache_bytes_per_token(gqa_cache):,} bytes per token; its attention has {attention:,} "
                 f"parameters, mla_small's {mla_attention:,} (the val-loss comparison below matches the "
                 "totals through the SwiGLU width).")
    notes.append(f"Decode: batch 1, {size['new']} greedy tokens after a prefilled prompt of the context's "
                 "length, one forward per token through zoo's dynamic KV cache (eager, fp32, CPU, one "
                 "thread: with two, on this 2-core machine shared with other engineers' tests, each small op "
                 "waited on the other thread, ~40 ms a token instead of ~1.3 ms for the quick size); "
                 f"tokens/s is the median of {size['repeats']} interleaved repeats. 'same tokens' and 'max "
                 "logit diff' compare the two caches' runs.")
    notes.append("Bytes are read off the filled caches (every layer's stored tensors / positions): latent = "
                 "layers x (kv_lora_rank + qk_rope_head_dim) x 4 bytes, materialised = layers x n_heads x "
                 "(qk_nope + qk_rope + v_head_dim) x 4 bytes.")
    table = markdown_table(["model", "context", "latent B/token", "materialised B/token", "ratio",
                            "latent tok/s", "materialised tok/s", "speed-up", "same tokens",
                            "max logit diff"], rows)
    load = os.getloadavg()[0]
    train_table, train_notes, trained = training(quick)
    notes += train_notes + [f"Load average {load:.1f} before training, {os.getloadavg()[0]:.1f} after "
                            "(2 cores shared with other engineers' tests: read the ratios, measured side by "
                            "side)."]
    return Section("MLA: latent vs materialised KV cache, and val loss against GQA",
                   table + "\n\n" + train_table, notes, data={**data, **trained})
