"""OLMo-hybrid (`olmo_hybrid`, Allen AI) both ways: OLMo 3's decoder where `layer_types` says which layers are
`linear_attention` (Gated DeltaNet: zoo's `model.linear_mixer: gated_deltanet`, layer tag `linear`) and which
`full_attention` (tag `full`; by default every fourth, and the last when none is). What differs by kind:
- the attention layers are OLMo 2's (olmo2.py): the norms on each sub-layer's output before the add
  (`post_attention_layernorm` / `post_feedforward_layernorm` -> zoo `post_norm_self` / `post_norm_ffn`,
  model.norm_placement=post_sublayer) and an RMSNorm over the whole q and k projections;
- the linear layers are pre-norm (`input_layernorm` / `post_attention_layernorm` -> `norm_self` /
  `norm_ffn`: model.linear_mixer.norm_placement=pre), their beta times 2 (`linear_allow_neg_eigval`,
  true by default) and their gated output norm at its own epsilon 1e-5 whatever `rms_norm_eps` says
  (model.linear_mixer.output_norm_eps);
- a linear layer stores q, k and v apart (`linear_attn.q_proj | k_proj | v_proj`, read and written by hand
  as zoo's `qkv`), the output gate as `g_proj` (zoo's z), beta's and the decay's inputs as `b_proj` /
  `a_proj`, the gated norm as `o_norm`, the output as `o_proj`.
Names as stored (transformers' conversion_mapping for olmo_hybrid, which its save_pretrained writes and its
load reverses): the layer norms `attention_layer_norm` / `feedforward_layer_norm` (the modules'
`input_layernorm` / `post_attention_layernorm`, in attention layers too) and the convolution over [q | k | v]
(the module's `conv1d`, zoo's `conv`) cut in `q_conv1d | k_conv1d | v_conv1d`. transformers' save cuts it in
three equal parts, OLMo-core's checkpoints at the q / k / v widths: zoo reads either, and the modules' names,
and writes the q / k / v widths, which transformers joins again on load.
transformers' layer repeats no key head over value heads, so its linear key and value head counts are equal.
Refused in one error: RoPE scalings (the default rotation only), `attention_bias` (q, k, v and o, not the
MLP: zoo cannot), a `hidden_act` other than silu (the MLP's and the convolution's). Not read: the init-only
`linear_a_log_*` / `linear_dt_*` ranges."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN_ROPE, Rope, pattern_of
from zoo.pretrained.decoder_heads import NO_QA
from zoo.pretrained.family import Checks
from zoo.pretrained.llama import LlamaShaped
from zoo.pretrained.olmo2 import Olmo2
from zoo.pretrained.tensor_map import HFTensors, Rows, stored_name, within

LINEAR = {  # a Gated DeltaNet layer: zoo -> HF as stored (gated_deltanet's names); qkv, conv by hand
    "norm_self.weight": "attention_layer_norm.weight", "norm_ffn.weight": "feedforward_layer_norm.weight",
    "self_attn.z.weight": "linear_attn.g_proj.weight", "self_attn.b.weight": "linear_attn.b_proj.weight",
    "self_attn.a.weight": "linear_attn.a_proj.weight",
    "self_attn.A_log": "linear_attn.A_log", "self_attn.dt_bias": "linear_attn.dt_bias",
    "self_attn.norm.weight": "linear_attn.o_norm.weight", "self_attn.o.weight": "linear_attn.o_proj.weight",
}
TENSORS = {**Olmo2.tensors, **within("decoder_stack.layers.{i}.", "layers.{i}.", {  # attention layers, stored
    "post_norm_self.weight": "feedforward_layer_norm.weight"})}
QKV = "qkv"  # linear_attn.{q,k,v}_proj stacked as zoo's self_attn.qkv rows, {q,k,v}_conv1d as its conv's
STORED = {".input_layernorm.": ".attention_layer_norm.",  # the modules' names -> the stored ones
          ".post_attention_layernorm.": ".feedforward_layer_norm."}
KINDS = {"linear_attention": "linear", "full_attention": "full"}  # layer_types -> zoo's layer tag
OUTPUT_NORM_EPS = 1e-5  # OlmoHybridGatedDeltaNet's o_norm, fixed (flash-linear-attention's default)


def default_layer_types(n: int) -> list[str]:
    """transformers' default: every fourth layer attention, the last one when that leaves none."""
    kinds = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(n)]
    if n and "full_attention" not in kinds:
        kinds[-1] = "full_attention"
    return kinds


def linear_keys(hf: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The linear mixer's keys as OlmoHybridConfig fills them: heads as attention's, key size 3/4 of the
    width over them, value size twice the key size."""
    key_heads = hf.get("linear_num_key_heads") or settings["n_heads"]
    key_dim = hf.get("linear_key_head_dim") or int(0.75 * settings["d_model"] / key_heads)
    return {"linear_num_key_heads": key_heads,
            "linear_num_value_heads": hf.get("linear_num_value_heads") or settings["n_heads"],
            "linear_key_head_dim": key_dim,
            "linear_value_head_dim": hf.get("linear_value_head_dim") or 2 * key_dim,
            "linear_conv_kernel_dim": hf.get("linear_conv_kernel_dim", 4),
            "linear_allow_neg_eigval": hf.get("linear_allow_neg_eigval", True)}


class OlmoHybrid(LlamaShaped):
    """OlmoHybridForCausalLM and OlmoHybridModel (transformers ships no other head)."""

    model_type = "olmo_hybrid"
    class_prefix = "OlmoHybrid"
    heads = {head: NO_QA[head] for head in ("none", "lm")}
    tensors = TENSORS
    fixed = Olmo2.fixed
    defaults = {"max_position_embeddings": 65536, "vocab_size": 100352}
    requires = {"attention_bias": False, "hidden_act": "silu"}
    rope = Rope(PLAIN_ROPE)

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        params = hf.get("rope_parameters")
        nope = isinstance(params, Mapping) and "rope_theta" in params and params["rope_theta"] is None
        if nope:  # transformers then builds no rotary embedding (NoPE), which this family does not read
            hf = {**hf, "rope_parameters": {k: v for k, v in params.items() if k != "rope_theta"}}
        more, checks = super().more_from_hf(hf, settings)
        checks["rope_parameters.rope_theta given (null: attention without RoPE)"] = (not nope, True)
        n = settings["n_layers"]
        given = hf.get("layer_types") or default_layer_types(n)
        known = len(given) == n and set(given) <= set(KINDS)
        checks["layer_types (linear_attention or full_attention, one per layer)"] = (known, True)
        tags = [KINDS[kind] for kind in given] if known else ["full"] * n
        if "linear" in tags:
            keys = linear_keys(hf, settings)
            same = keys["linear_num_key_heads"] == keys["linear_num_value_heads"]
            checks["linear_num_value_heads == linear_num_key_heads"] = (same, True)
            more.update({"linear_mixer": "gated_deltanet", "linear_mixer.norm_placement": "pre",
                         "linear_mixer.output_norm_eps": OUTPUT_NORM_EPS,
                         **{f"linear_mixer.{k}": v for k, v in keys.items()}})
        return {**more, "layer_pattern": pattern_of(tags, "full")}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """Another linear mixer (or none) is written as OLMo-hybrid's defaults: the round trip names it."""
        linear = cfg.linear_mixer
        linear = linear if linear is not None and linear.name == "gated_deltanet" else None
        keys = linear_keys({}, {"n_heads": cfg.n_heads, "d_model": cfg.d_model})
        return {**super().more_to_hf(cfg),
                **{k: getattr(linear, k) if linear else v for k, v in keys.items()},
                "layer_types": ["linear_attention" if cfg.layer_is_linear(i) else "full_attention"
                                for i in range(cfg.n_layers)]}

    def tensor_map(self, cfg: ModelConfig) -> Rows:
        """The linear layers' rows by layer index, before the attention layers' (the first row that matches a
        name reads it)."""
        rows: dict = {}
        for i in filter(cfg.layer_is_linear, range(cfg.n_layers)):
            rows.update(within(f"decoder_stack.layers.{i}.", f"layers.{i}.", LINEAR))
        return {**rows, **self.tensors}

    @staticmethod
    def qkv_sizes(cfg: ModelConfig) -> list[int]:
        """Rows of a linear layer's q, k and v projections (none without linear layers)."""
        s = cfg.linear_mixer
        if s is None:
            return [0, 0, 0]
        key = s.linear_num_key_heads * s.linear_key_head_dim
        return [key, key, s.linear_num_value_heads * s.linear_value_head_dim]

    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """The linear layers' q/k/v projections and convolution; a file under the modules' names is read as
        if stored (as transformers' load does)."""
        for key in list(src.tensors):
            for module_name, stored in STORED.items():
                if module_name in key:
                    src.tensors[key.replace(module_name, stored)] = src.tensors.pop(key)
        out = super().read_first(src, cfg)
        sizes = self.qkv_sizes(cfg)
        kernel = cfg.linear_mixer.linear_conv_kernel_dim if cfg.linear_mixer else 0
        for i in filter(cfg.layer_is_linear, range(cfg.n_layers)):
            hf, zoo = f"layers.{i}.linear_attn.", f"decoder_stack.layers.{i}.self_attn."
            out[zoo + "qkv.weight"] = torch.cat([src.take(f"{hf}{p}_proj.weight", (rows, cfg.d_model))
                                                 for p, rows in zip(QKV, sizes, strict=True)])
            if src.has(hf + "conv1d.weight"):
                out[zoo + "conv.weight"] = src.take(hf + "conv1d.weight", (sum(sizes), 1, kernel))
                continue
            stored = [src.tensors.get(src.key(f"{hf}{p}_conv1d.weight")) for p in QKV]
            cut = [len(t) for t in stored] if None not in stored and sum(map(len, stored)) == sum(sizes) \
                else sizes  # equal thirds (transformers' save) or q / k / v (OLMo-core); else named
            out[zoo + "conv.weight"] = torch.cat([src.take(f"{hf}{p}_conv1d.weight", (rows, 1, kernel))
                                                  for p, rows in zip(QKV, cut, strict=True)])
        return out

    def state_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        linear = list(filter(cfg.layer_is_linear, range(cfg.n_layers)))
        by_hand = {f"decoder_stack.layers.{i}.self_attn.qkv.weight": i for i in linear}
        conv = {name.replace("qkv.", "conv.") for name in by_hand}
        out = super().state_to_hf({k: v for k, v in state.items() if k not in by_hand and k not in conv}, cfg)
        prefix = self.base_prefix(cfg)
        sizes = self.qkv_sizes(cfg)
        for name, i in by_hand.items():
            hf, conv = f"layers.{i}.linear_attn.", state[name.replace("qkv.", "conv.")]
            for p, proj, taps in zip(QKV, state[name].split(sizes), conv.split(sizes), strict=True):
                out[stored_name(f"{hf}{p}_proj.weight", prefix)] = proj
                out[stored_name(f"{hf}{p}_conv1d.weight", prefix)] = taps
        return out

