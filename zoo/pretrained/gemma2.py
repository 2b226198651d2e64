"""Gemma 2: Gemma (gemma.py) with sandwich norms (a second norm on each sub-layer's output: HF
`post_attention_layernorm` / `post_feedforward_layernorm` -> zoo `post_norm_self` / `post_norm_ffn`, and
`pre_feedforward_layernorm` -> `norm_ffn`), tanh soft caps on the attention scores and the logits, a score scale
of query_pre_attn_scalar ** -0.5, and a sliding window on the layers `layer_types` marks (every other one,
starting with layer 0, by default)."""

from __future__ import annotations

import math
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.family import FAMILIES, require
from zoo.pretrained.gemma import Gemma

LOCAL, GLOBAL = "sliding_attention", "full_attention"


def local_layers(n_layers: int, global_every: int) -> list[bool]:
    """Which layers zoo's `global_every` makes local (asked of ModelConfig.layer_is_local)."""
    cfg = ModelConfig(sliding_window=1, global_every=global_every)
    return [cfg.layer_is_local(i) for i in range(n_layers)]


def global_every_for(local: list[bool]) -> int | None:
    """zoo's `global_every` giving this local/global pattern (Gemma 2's alternation first), or None if none does."""
    for every in (2, 0, *range(1, len(local) + 1)):
        if local_layers(len(local), every) == local:
            return every
    return None


@FAMILIES.register("gemma2")
class Gemma2(Gemma):
    model_type = "gemma2"
    architecture = "Gemma2ForCausalLM"
    class_prefix = "Gemma2"
    activation_key = "hidden_activation"  # Gemma2MLP reads this one; `hidden_act` is ignored
    activations = ("gelu_pytorch_tanh",)
    legacy_activation_key = None
    norm_placement = "sandwich"
    layer_norms = {"input_layernorm": "norm_self", "post_attention_layernorm": "post_norm_self",
                   "pre_feedforward_layernorm": "norm_ffn", "post_feedforward_layernorm": "post_norm_ffn"}

    def knobs(self, hf: dict[str, Any]) -> dict[str, Any]:
        out = super().knobs(hf)
        n, window = out["n_layers"], hf.get("sliding_window", 4096)
        types = hf.get("layer_types") or [LOCAL if local else GLOBAL for local in local_layers(n, 2)]
        local = [t == LOCAL for t in types]
        every = global_every_for(local)
        require(hf, self.model_type, {
            f"layer_types in ({LOCAL}, {GLOBAL})": (set(types) <= {LOCAL, GLOBAL}, True),
            "len(layer_types) == num_hidden_layers": (len(types) == n, True),
            "layer_types global every k-th layer": (every is not None, True),
            "sliding_window given for sliding_attention layers": (window is not None or not any(local), True),
        })
        scalar = hf.get("query_pre_attn_scalar", 256)
        caps = {key: hf.get(key, default) for key, default in
                (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0))}
        out.update(
            attn_scale=None if scalar == out["head_dim"] else float(scalar) ** -0.5,
            attn_softcap=None if caps["attn_logit_softcapping"] is None else float(caps["attn_logit_softcapping"]),
            final_softcap=None if caps["final_logit_softcapping"] is None else float(caps["final_logit_softcapping"]),
            sliding_window=window if any(local) else None, global_every=every if any(local) else 0,
        )
        return out

    def export_checks(self, cfg: ModelConfig) -> dict[str, tuple[Any, Any]]:
        checks = super().export_checks(cfg)
        for key in ("attn_scale", "attn_softcap", "final_softcap", "sliding_window"):
            del checks[key]
        checks["d_model % n_heads"] = (cfg.d_model % cfg.n_heads, 0)  # Gemma2Config.validate_architecture
        return checks

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        out = super().config_to_hf(cfg)
        scalar: float = cfg.head_size if cfg.attn_scale is None else cfg.attn_scale**-2
        if math.isclose(scalar, round(scalar), rel_tol=1e-12):
            scalar = round(scalar)
        out.update(
            hidden_act="gelu_pytorch_tanh", query_pre_attn_scalar=scalar,
            attn_logit_softcapping=cfg.attn_softcap, final_logit_softcapping=cfg.final_softcap,
            # a model without local layers still needs a window: transformers builds the sliding mask anyway
            sliding_window=cfg.max_seq_len if cfg.sliding_window is None else cfg.sliding_window,
            layer_types=[LOCAL if cfg.layer_is_local(i) else GLOBAL for i in range(cfg.n_layers)],
        )
        return out
