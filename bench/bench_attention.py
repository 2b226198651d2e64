"""Attention: the fused `scaled_dot_product_attention` path vs the explicit path that also returns the
softmax weights (`need_weights=True`, what inspection uses), on one zoo `Attention` layer with a causal
mask, forward only (inference) and forward + backward (training)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.common import Section, interleaved, markdown_table
from zoo.config import ModelConfig
from zoo.modules.attention import Attention
from zoo.modules.mask import build_mask

SIZES = {False: {"seq_lens": (256, 1024), "batch": 2, "d_model": 256, "n_heads": 4},
         True: {"seq_lens": (32,), "batch": 1, "d_model": 32, "n_heads": 2}}


def attention_call(layer: Attention, x: torch.Tensor, *, need_weights: bool,
                   backward: bool) -> Callable[[], None]:
    t = x.shape[1]
    mask = build_mask(None, causal=True, q_len=t, k_len=t)

    def run() -> None:
        if backward:
            out, _ = layer(x, mask, need_weights=need_weights)
            out.sum().backward()
        else:
            with torch.no_grad():
                layer(x, mask, need_weights=need_weights)

    return run


def run(quick: bool = False) -> Section:
    size = SIZES[quick]
    warmup, repeats = (1, 2) if quick else (3, 15)
    cfg = ModelConfig(d_model=size["d_model"], n_heads=size["n_heads"], dropout=0.0)
    layer = Attention(cfg)
    rows = []
    for t in size["seq_lens"]:
        x = torch.randn(size["batch"], t, cfg.d_model, requires_grad=True)
        for mode, backward in (("forward", False), ("forward + backward", True)):
            sides = {
                "fused": attention_call(layer, x, need_weights=False, backward=backward),
                "weights": attention_call(layer, x, need_weights=True, backward=backward),
            }
            tm = interleaved(sides, warmup=warmup, repeats=repeats)
            fused, weights = tm["fused"].median, tm["weights"].median
            rows.append([t, mode, f"{fused * 1e3:.2f}", f"{weights * 1e3:.2f}", f"{weights / fused:.2f}x"])
    headers = ["T", "pass", "fused SDPA ms", "weights path ms", "weights / fused"]
    notes = [
        f"One `zoo.modules.attention.Attention` layer: B={size['batch']}, d_model={cfg.d_model}, "
        f"{cfg.n_heads} heads (head_dim {cfg.head_size}), causal (`is_causal` fast path), fp32, dropout 0; "
        "time includes the qkv and output projections.",
        "The weights path materialises (B, H, T, T) scores and weights; the fused path never does, so the "
        "gap (and memory) grows with T.",
    ]
    return Section("Attention: fused SDPA vs weights-returning path", markdown_table(headers, rows), notes)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).markdown())
