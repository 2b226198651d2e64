"""LFM2 (Liquid AI) both ways: a hybrid of gated short convolutions (zoo's model.linear_mixer=short_conv, the
layers `layer_types` says "conv") and grouped-query attention with an RMSNorm on each head's q and k (the
"full_attention" layers, model.mixer), each followed by a SwiGLU MLP. `layer_types` (or, in older configs,
`full_attn_idxs`: the attention layers, default every layer) is zoo's model.layer_pattern, `linear` for a conv
layer and `full` for an attention one. Names: `conv.in_proj | conv.conv | conv.out_proj` (zoo's
self_attn.in_proj | conv | out_proj), `self_attn.q_proj | k_proj | v_proj | out_proj | q_layernorm |
k_layernorm`, `feed_forward.w1 | w3 | w2` (gate, up, down), `operator_norm` / `ffn_norm` before the two
sub-layers and `embedding_norm` after the last layer (zoo's final norm, despite its name).

The MLP's width is derived as transformers derives it: with `block_auto_adjust_ff_dim`, 2/3 of
`intermediate_size` (or `block_ff_dim`, which overrides it), times `block_ffn_dim_multiplier`, rounded up to
`block_multiple_of`; export writes the width itself with the adjustment off. RoPE: the default kind only
(base `rope_theta`, 1e6 when absent).

LFM2-MoE (`lfm2_moe`, LFM2-8B-A1B): LFM2's layers with a Mixture of Experts after the first `num_dense_layers`
dense ones (model.layer_pattern's dense / moe tags beside linear / full), whose dense MLP is
`intermediate_size` as given (no adjustment). The router `feed_forward.gate` is zoo's `sigmoid_bias` (sigmoid
scores plus the `expert_bias` buffer to choose, `norm_topk_prob`), its weights times `routed_scaling_factor`
(route_scale), routed as transformers' Lfm2MoeTopKRouter does: in the model's dtype (router.float32 false:
logits, sigmoid scores and weights in bf16 in a bf16 model, the expert bias float32 and added only to choose)
with the kept scores' sum + 1e-6 (router.renorm_eps); experts `feed_forward.experts.{e}.w1 | w3 | w2` of width
`moe_intermediate_size`. Routing without the bias (`use_expert_bias: false`) is refused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN_ROPE, Key, Rope, moe_paths, pattern_of, with_tags
from zoo.pretrained.decoder_heads import BARE, LM
from zoo.pretrained.family import Checks
from zoo.pretrained.llama import DECODER, LlamaShaped
from zoo.pretrained.tensor_map import within

LAYER = {  # zoo -> HF inside a layer; a conv layer has the first three, an attention layer the next four
    "self_attn.in_proj.{p}": "conv.in_proj.{p}", "self_attn.conv.{p}": "conv.conv.{p}",
    "self_attn.out_proj.{p}": "conv.out_proj.{p}",
    "self_attn.qkv.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "self_attn.o.weight": "self_attn.out_proj.weight",
    "self_attn.q_norm.weight": "self_attn.q_layernorm.weight",
    "self_attn.k_norm.weight": "self_attn.k_layernorm.weight",
    "ffn.up.weight": ("feed_forward.w1.weight", "feed_forward.w3.weight"),
    "ffn.down.weight": "feed_forward.w2.weight",
    "norm_self.weight": "operator_norm.weight", "norm_ffn.weight": "ffn_norm.weight",
}
TENSORS = {"embed.tokens.weight": "embed_tokens.weight",
           "decoder_stack.final_norm.weight": "embedding_norm.weight",
           **within("decoder_stack.layers.{i}.", "layers.{i}.", LAYER)}
KEYS = (
    # the sizes are required (as every family's): Lfm2Config's defaults describe no released checkpoint
    Key("vocab_size", "vocab_size"), Key("d_model", "hidden_size"),
    Key("n_layers", "num_hidden_layers"), Key("n_heads", "num_attention_heads"),
    Key("n_kv_heads", "num_key_value_heads", 8), Key("norm_eps", "norm_eps", 1e-5),
    Key("max_seq_len", "max_position_embeddings", 128_000),
    Key("pad_id", "pad_token_id", 0, token=True), Key("bos_id", "bos_token_id", 1, token=True),
    Key("eos_id", "eos_token_id", 2, token=True),
)
EXPERTS = {  # zoo -> HF inside an LFM2-MoE layer
    "ffn.router.proj.weight": "feed_forward.gate.weight", "ffn.router.bias": "feed_forward.expert_bias",
    "ffn.experts.{e}.up.weight": ("feed_forward.experts.{e}.w1.weight", "feed_forward.experts.{e}.w3.weight"),
    "ffn.experts.{e}.down.weight": "feed_forward.experts.{e}.w2.weight",
}
KINDS = {"conv": "linear", "full_attention": "full"}  # transformers' layer_types -> zoo's mixer tag
CONV = "short_conv"


def ffn_width(hf: Mapping[str, Any]) -> int:
    """Lfm2MLP's width from config.json, as transformers derives it."""
    width = hf.get("block_ff_dim", hf.get("intermediate_size", 12288))
    if hf.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier = hf.get("block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            step = hf.get("block_multiple_of", 256)
            width = step * ((int(multiplier * width) + step - 1) // step)
    return width


class Lfm2(LlamaShaped):
    model_type = "lfm2"
    class_prefix = "Lfm2"
    prefixes = ("model.",)
    heads = {"none": BARE, "lm": LM}  # transformers has Lfm2Model and Lfm2ForCausalLM only
    keys = KEYS
    fixed = {**DECODER, "activation": "swiglu", "mixer.qk_norm": True}
    tensors = TENSORS
    rope = Rope(PLAIN_ROPE)

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        rope, checks = self.rope.from_hf({"rope_theta": 1e6, **hf})  # Lfm2Config's default theta
        n_layers = settings["n_layers"]
        kinds = hf.get("layer_types")
        if kinds is None:
            attention = hf.get("full_attn_idxs")
            attention = range(n_layers) if attention is None else attention
            kinds = ["full_attention" if i in attention else "conv" for i in range(n_layers)]
        known = isinstance(kinds, list) and len(kinds) == n_layers and set(kinds) <= set(KINDS)
        checks[f"layer_types (one per layer of {n_layers}, each of {', '.join(KINDS)})"] = (known, True)
        tags = [KINDS.get(kind, "full") for kind in kinds] if known else ["full"] * n_layers
        tie = hf.get("tie_embedding", hf.get("tie_word_embeddings", True))  # Lfm2Config reads the old name
        more = {"n_kv_heads": hf.get("num_key_value_heads") or settings["n_heads"], "d_ff": ffn_width(hf),
                "tie_embeddings": tie, "layer_pattern": pattern_of(tags, "full")}
        if "linear" in tags:
            more.update({"linear_mixer.name": CONV, "linear_mixer.conv_L_cache": hf.get("conv_L_cache", 3),
                         "linear_mixer.conv_bias": hf.get("conv_bias", False)})
        return {**rope, **more}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        conv = cfg.linear_mixer if cfg.linear_mixer is not None and cfg.linear_mixer.name == CONV else None
        kinds = ["conv" if conv is not None and cfg.layer_is_linear(i) else "full_attention"
                 for i in range(cfg.n_layers)]
        return {**self.rope.to_hf(cfg), "intermediate_size": cfg.ffn_dim, "block_auto_adjust_ff_dim": False,
                "tie_word_embeddings": cfg.tie_embeddings, "layer_types": kinds,
                "full_attn_idxs": [i for i, kind in enumerate(kinds) if kind == "full_attention"],
                "conv_L_cache": conv.conv_L_cache if conv else 3,
                "conv_bias": conv.conv_bias if conv else False}


class Lfm2Moe(Lfm2):
    model_type = "lfm2_moe"
    class_prefix = "Lfm2Moe"
    fixed = {**Lfm2.fixed, "ffn": "moe"}
    requires = {"use_expert_bias": True}
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", EXPERTS)}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)
        dense = hf.get("num_dense_layers", 2)
        known = isinstance(dense, int) and not isinstance(dense, bool) and dense >= 0
        checks["num_dense_layers (an integer >= 0)"] = (known, True)
        layers = ["dense" if known and i < dense else "moe" for i in range(settings["n_layers"])]
        router = {"name": "sigmoid_bias", "float32": False, "renorm_eps": 1e-6,
                  "norm_topk_prob": bool(hf.get("norm_topk_prob", True))}
        moe = {"n_experts": hf.get("num_experts", 32), "top_k": hf.get("num_experts_per_tok", 4),
               "expert_d_ff": hf.get("moe_intermediate_size", 1792), "balance": {}, "router": router,
               "route_scale": float(hf.get("routed_scaling_factor", 1.0))}
        width = hf.get("intermediate_size", 7168)  # Lfm2MoeMLP's, as given
        return ({**more, **moe_paths(moe), "d_ff": width,
                 "layer_pattern": with_tags(more["layer_pattern"], layers, "moe")}, checks)

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        moe = cfg.ffn
        out = super().more_to_hf(cfg)
        del out["block_auto_adjust_ff_dim"]  # Lfm2MoeConfig has no such key: its dense width is as given
        dense = next((i for i in range(cfg.n_layers) if cfg.layer_is_moe(i)), cfg.n_layers)
        return {**out, "num_experts": moe.n_experts, "num_experts_per_tok": moe.top_k,
                "moe_intermediate_size": moe.expert_d_ff or cfg.ffn_dim,
                "routed_scaling_factor": moe.route_scale,
                "norm_topk_prob": getattr(moe.router, "norm_topk_prob", True), "num_dense_layers": dense}
