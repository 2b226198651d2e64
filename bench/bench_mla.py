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

    python -m bench.run --sections mla
"""

from __future__ import annotations

import torch

import zoo
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
                 f"parameters, mla_small's {mla_attention:,} (not equal: the val-loss comparison at equal "
                 "parameters the issue asks for is not measured here).")
    notes.append(f"Decode: batch 1, {size['new']} greedy tokens after a prefilled prompt of the context's "
                 "length, one forward per token through zoo's dynamic KV cache (eager, fp32, CPU); tokens/s "
                 f"is the median of {size['repeats']} interleaved repeats. 'same tokens' and 'max logit "
                 "diff' compare the two caches' runs.")
    notes.append("Bytes are read off the filled caches (every layer's stored tensors / positions): latent = "
                 "layers x (kv_lora_rank + qk_rope_head_dim) x 4 bytes, materialised = layers x n_heads x "
                 "(qk_nope + qk_rope + v_head_dim) x 4 bytes.")
    table = markdown_table(["model", "context", "latent B/token", "materialised B/token", "ratio",
                            "latent tok/s", "materialised tok/s", "speed-up", "same tokens",
                            "max logit diff"], rows)
    return Section("MLA: latent vs materialised KV cache", table, notes, data=data)
