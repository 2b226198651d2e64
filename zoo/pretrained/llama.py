"""Llama and the Llama-shaped decoders: RMSNorm pre-norm, RoPE (rotate-half), a gated MLP, grouped-query
attention; `model.embed_tokens`, `model.layers.{i}.*`, `model.norm`, then the head the folder's class says
(decoder_heads.py). HF keeps q/k/v and gate/up as separate matrices; zoo stacks them as [q | k | v] and
[gate | value]. Each family below is Llama's tables with what differs:
Mistral: no biases, every layer attending within `sliding_window` (model.mixer.sliding_window; null: full
attention; transformers ignores a Mistral config's `layer_types`, and so does zoo). Qwen2 (and 2.5): biases on
q, k and v only (model.mixer.qkv_bias); its sliding window on the layers `layer_types` names (else from
`max_window_layers` on) as model.layer_pattern's local layers (Qwen MoE: qwen_moe.py). Qwen3: Qwen2 with an
RMSNorm on each head's q and k (model.mixer.qk_norm), head_dim 128 when omitted, no q/k/v bias. Phi-3:
Mistral's with q/k/v fused in `qkv_proj`, gate/up in `gate_up_proj`, a partial rotary
(model.positional.fraction), plain RoPE or LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini:
model.positional.scaling=longrope, its original length the top-level `original_max_position_embeddings`, as
transformers reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN_ROPE, ROPE_TYPES, Key, Rope, pattern_of
from zoo.pretrained.decoder_heads import LLAMA_HEADS, NO_QA, QA
from zoo.pretrained.family import Checks, Family
from zoo.pretrained.tensor_map import HFTensors, within

LAYER = {  # zoo -> HF inside a layer
    "self_attn.qkv.{p}": ("self_attn.q_proj.{p}", "self_attn.k_proj.{p}", "self_attn.v_proj.{p}"),
    "self_attn.o.{p}": "self_attn.o_proj.{p}",
    "self_attn.q_norm.weight": "self_attn.q_norm.weight",
    "self_attn.k_norm.weight": "self_attn.k_norm.weight",
    "ffn.up.{p}": ("mlp.gate_proj.{p}", "mlp.up_proj.{p}"), "ffn.down.{p}": "mlp.down_proj.{p}",
    "norm_self.weight": "input_layernorm.weight", "norm_ffn.weight": "post_attention_layernorm.weight",
}
TENSORS = {"embed.tokens.weight": "embed_tokens.weight", "decoder_stack.final_norm.weight": "norm.weight",
           **within("decoder_stack.layers.{i}.", "layers.{i}.", LAYER)}
GATED = {"silu": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu_tanh"}  # HF hidden_act -> zoo
KEYS = (
    Key("vocab_size", "vocab_size"), Key("d_model", "hidden_size"), Key("n_layers", "num_hidden_layers"),
    Key("n_heads", "num_attention_heads"), Key("n_kv_heads", "num_key_value_heads", None),
    Key("head_dim", "head_dim", None), Key("d_ff", "intermediate_size"),
    Key("activation", "hidden_act", "silu", GATED),
    Key("norm_eps", "rms_norm_eps", 1e-6), Key("max_seq_len", "max_position_embeddings", 2048),
    Key("attn_dropout", "attention_dropout", 0.0), Key("tie_embeddings", "tie_word_embeddings", False),
    Key("pad_id", "pad_token_id", 0, token=True), Key("bos_id", "bos_token_id", 1, token=True),
    Key("eos_id", "eos_token_id", 2, token=True),
)
DECODER = {"arch": "decoder", "norm": "rmsnorm", "norm_placement": "pre", "positional": "rope",
           "positional.layout": "half", "dropout": 0.0, "bias": False}
WINDOW = Key("mixer.sliding_window", "sliding_window", 4096)


class LlamaShaped(Family):
    """The tables the Llama-shaped families share (RoPE through `rope`)."""

    class_prefix = "Llama"
    prefixes = ("model.", "transformer.")  # *ForCausalLM, ...; LlamaForQuestionAnswering
    heads = LLAMA_HEADS
    tensors = TENSORS
    keys = KEYS
    fixed = DECODER
    rope = Rope(ROPE_TYPES)

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        rope, checks = self.rope.from_hf(hf)
        return {**rope, "n_kv_heads": hf.get("num_key_value_heads") or settings["n_heads"]}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return self.rope.to_hf(cfg)

    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """A tied checkpoint may store either tensor of the pair (transformers loads one holding only
        `lm_head.weight`): then the stored head is the token table."""
        if cfg.tie_embeddings and not src.has("embed_tokens.weight") and src.has("~lm_head.weight"):
            return {"embed.tokens.weight": src.take("~lm_head.weight", (cfg.vocab_size, cfg.d_model))}
        return {}


class Llama(LlamaShaped):
    """`attention_bias` on q, k, v and o; zoo's `bias` also covers the MLP, so `mlp_bias` must match."""

    model_type = "llama"
    keys = (*KEYS, Key("bias", "attention_bias", False))

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        rope, checks = super().more_from_hf(hf, settings)
        same = hf.get("mlp_bias", False) == settings["bias"]
        return rope, {**checks, "mlp_bias == attention_bias": (same, True)}

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {**super().more_to_hf(cfg), "mlp_bias": cfg.bias}


class Mistral(LlamaShaped):
    model_type = "mistral"
    class_prefix = "Mistral"
    heads = {**LLAMA_HEADS, "qa": QA}  # MistralForQuestionAnswering keeps its base under `model.`
    keys = (*KEYS, WINDOW)
    defaults = {"max_position_embeddings": 4096 * 32}


class Qwen2(LlamaShaped):
    model_type = "qwen2"
    class_prefix = "Qwen2"
    fixed = {**DECODER, "mixer.qkv_bias": True}
    defaults = {"max_position_embeddings": 32768}
    KINDS = ("full_attention", "sliding_attention")
    reads_layer_types = True  # False: the model slides on every layer whatever `layer_types` says

    def layer_kinds(self, hf: Mapping[str, Any], n_layers: int) -> list[str]:
        """Each layer's kind where config.json lists none (Qwen2Config: sliding from max_window_layers on)."""
        return [self.KINDS[i >= hf.get("max_window_layers", 28)] for i in range(n_layers)]

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        """The window on the layers `layer_types` says (else on those `layer_kinds` gives)."""
        rope, checks = super().more_from_hf(hf, settings)
        window = hf.get("sliding_window", 4096) if hf.get("use_sliding_window", False) else None  # as Qwen2
        n_layers = settings["n_layers"]
        given = hf.get("layer_types") if self.reads_layer_types else None
        kinds = list(given or self.layer_kinds(hf, n_layers))
        if window is not None:
            known = len(kinds) == n_layers and set(kinds) <= set(self.KINDS)
            checks["layer_types (full_attention or sliding_attention, one per layer)"] = (known, True)
        local = [window is not None and kind == self.KINDS[1] for kind in kinds]
        pattern = pattern_of(["local" if is_local else "global" for is_local in local], "local")
        return {**rope, "mixer.sliding_window": window if any(local) else None,
                "layer_pattern": pattern if any(local) else []}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        local = [cfg.layer_is_local(i) for i in range(cfg.n_layers)]
        window = cfg.mixer.sliding_window if any(local) else None
        return {**super().more_to_hf(cfg), "use_sliding_window": window is not None, "sliding_window": window,
                "max_window_layers": local.index(True) if window is not None else cfg.n_layers,
                "layer_types": [self.KINDS[is_local] for is_local in local]}


class Qwen3(Qwen2):
    """`attention_bias: true` biases o as well but not the MLP, which zoo cannot express."""

    model_type = "qwen3"
    class_prefix = "Qwen3"
    fixed = {**DECODER, "mixer.qk_norm": True}
    defaults = {**Qwen2.defaults, "head_dim": 128}
    requires = {"attention_bias": False}


class Phi3(LlamaShaped):
    model_type = "phi3"
    class_prefix = "Phi3"
    heads = NO_QA  # transformers has no Phi3ForQuestionAnswering
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", {
        "self_attn.qkv.{p}": "self_attn.qkv_proj.{p}", "ffn.up.{p}": "mlp.gate_up_proj.{p}"})}
    keys = (*KEYS, WINDOW)
    defaults = {"max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "sliding_window": None}
    # transformers' Phi-3 reads its older names "su" and "yarn" as LongRoPE; export writes "longrope" (last)
    rope = Rope({**PLAIN_ROPE, "su": "longrope", "yarn": "longrope", "longrope": "longrope"},
                partial=("partial_rotary_factor", 1.0), original=("original_max_position_embeddings", 4096))
