"""Gemma: Llama's layout with Gemma's details: RMSNorm with a (1 + w) gain (`rmsnorm_1p`; HF stores w), a
tanh-GELU gate (`geglu_tanh`), token embeddings times sqrt(hidden) (`embed_scale`), an explicit head size, a
tied head, no biases, plain RoPE. Gemma 2 adds sandwich norms (a second norm on each sub-layer's output: HF
`post_attention_layernorm` / `post_feedforward_layernorm` -> zoo `post_norm_self` / `post_norm_ffn`, and
`pre_feedforward_layernorm` -> `norm_ffn`), tanh soft caps on the attention scores and the logits, a score
scale of query_pre_attn_scalar ** -0.5, and a sliding window on the layers `layer_types` marks (every other
one, starting with layer 0, by default; zoo's `model.layer_pattern`, any pattern). Gemma 3 (text,
`gemma3_text`) is Gemma 2 without the soft caps, with qk-norm (each head's q and k, the same (1 + w) RMSNorm),
five local layers to one global by default, and RoPE per layer type: the global layers' `rope_theta` (1e6) and
scaling, the local ones' plain `rope_local_base_freq` (1e4, zoo's `model.positional.local_base`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN_ROPE, ROPE_TYPES, Key, Rope, pattern_of
from zoo.pretrained.decoder_heads import LLAMA_HEADS, NO_QA
from zoo.pretrained.family import Checks
from zoo.pretrained.llama import DECODER, KEYS, TENSORS, LlamaShaped
from zoo.pretrained.tensor_map import within

LOCAL, GLOBAL = "sliding_attention", "full_attention"
# the MLP activation: transformers 5 reads Gemma's legacy "gelu" as the tanh approximation too
# (GemmaConfig.__post_init__); exports write "gelu_pytorch_tanh"
TANH_GATE = {"gelu_pytorch_tanh": "geglu_tanh", "gelu": "geglu_tanh"}
def with_activation(key: str, choices: dict[str, str]) -> tuple[Key, ...]:
    """Llama's keys with the MLP activation read from `key` through `choices`."""
    return tuple(Key("activation", key, "gelu_pytorch_tanh", choices) if k.zoo == "activation" else k
                 for k in KEYS)


class Gemma(LlamaShaped):
    model_type = "gemma"
    class_prefix = "Gemma"
    heads = NO_QA  # transformers has no Gemma(2)ForQuestionAnswering
    keys = with_activation("hidden_act", TANH_GATE)
    defaults = {"head_dim": 256, "max_position_embeddings": 8192, "tie_word_embeddings": True,
                "bos_token_id": 2, "eos_token_id": 1}
    fixed = {**DECODER, "norm": "rmsnorm_1p", "embed_scale": True}
    # transformers 4.x ran `hidden_activation` instead of hidden_act when set
    requires = {"attention_bias": False, "use_bidirectional_attention": False,
                "hidden_activation": "gelu_pytorch_tanh"}
    rope = Rope(PLAIN_ROPE)

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)
        return {**more, "head_dim": hf.get("head_dim", 256)}, checks  # kept as given, even when the default


def every_kth_global(n_layers: int, k: int) -> list[str]:
    """transformers' default `layer_types` of Gemma 2 and 3 (and gpt-oss): layers k-1, 2k-1, ... global."""
    return [LOCAL if (i + 1) % k else GLOBAL for i in range(n_layers)]


def read_layer_types(types: Sequence[str], n_layers: int, window: int | None
                     ) -> tuple[dict[str, Any], Checks]:
    """config.json's `layer_types` (and the window of its sliding layers) -> model.mixer.sliding_window and
    model.layer_pattern (local/global per layer, as dotted paths; empty when every layer is of one kind), and
    the checks."""
    local = [t == LOCAL for t in types]
    checks = {f"layer_types in ({LOCAL}, {GLOBAL})": (set(types) <= {LOCAL, GLOBAL}, True),
              "len(layer_types) == num_hidden_layers": (len(types) == n_layers, True),
              "sliding_window given for sliding_attention layers": (window is not None or not any(local),
                                                                    True)}
    pattern = pattern_of(["local" if is_local else "global" for is_local in local], "local") if any(local) \
        else []
    return {"mixer.sliding_window": window if any(local) else None, "layer_pattern": pattern}, checks


def layer_types(cfg: ModelConfig) -> list[str]:
    """config.json's `layer_types`: each layer's kind, as `cfg` says it."""
    return [LOCAL if cfg.layer_is_local(i) else GLOBAL for i in range(cfg.n_layers)]


class Gemma2(Gemma):
    model_type = "gemma2"
    class_prefix = "Gemma2"
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", {
        "post_norm_self.weight": "post_attention_layernorm.weight",
        "norm_ffn.weight": "pre_feedforward_layernorm.weight",
        "post_norm_ffn.weight": "post_feedforward_layernorm.weight"})}
    # Gemma2MLP reads `hidden_activation`; `hidden_act` is ignored
    keys = with_activation("hidden_activation", {"gelu_pytorch_tanh": "geglu_tanh"})
    fixed = {**Gemma.fixed, "norm_placement": "sandwich"}
    requires = {"attention_bias": False, "use_bidirectional_attention": False}

    softcaps = {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}  # config.json defaults

    def global_period(self, hf: Mapping[str, Any]) -> int:
        """Every how many layers one is global when config.json has no `layer_types`."""
        return 2

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)
        n, d = settings["n_layers"], settings["d_model"]
        types = hf.get("layer_types") or every_kth_global(n, self.global_period(hf))
        window, window_checks = read_layer_types(types, n, hf.get("sliding_window", 4096))
        checks.update({**window_checks,
                       "hidden_size a multiple of num_attention_heads": (d % settings["n_heads"] == 0, True)})
        scalar = hf.get("query_pre_attn_scalar", 256)
        caps = [hf.get(key, default) for key, default in self.softcaps.items()]
        return {**more, "mixer.scale": None if scalar == more["head_dim"] else float(scalar) ** -0.5,
                "mixer.softcap": None if caps[0] is None else float(caps[0]),
                **self.lm_keys(hf, {"head.softcap": None if caps[1] is None else float(caps[1])}),
                **window}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        mixer = cfg.mixer
        scalar: float = cfg.head_size if mixer.scale is None else mixer.scale**-2
        if math.isclose(scalar, round(scalar), rel_tol=1e-12):
            scalar = round(scalar)
        return {
            **super().more_to_hf(cfg), "hidden_act": "gelu_pytorch_tanh", "query_pre_attn_scalar": scalar,
            "attn_logit_softcapping": mixer.softcap,
            "final_logit_softcapping": getattr(cfg.head, "softcap", None),  # the LM's; another head has none
            # a model without local layers still needs a window: transformers builds the sliding mask anyway
            "sliding_window": cfg.max_seq_len if mixer.sliding_window is None else mixer.sliding_window,
            "layer_types": layer_types(cfg),
        }


@dataclass(frozen=True)
class LayerTypeRope:
    """RoPE per layer type, `rope_parameters` {full_attention: ..., sliding_attention: ...}; 4.x keys: the
    `base` of each Rope (and `rope_scaling` for the global layers), each base defaulting to its `*_default`.
    Gemma 3's: the global as Llama's, the local plain."""

    full: Rope = Rope(ROPE_TYPES)
    sliding: Rope = Rope(PLAIN_ROPE, base="rope_local_base_freq")
    full_default: float = 1e6
    sliding_default: float = 1e4

    def from_hf(self, hf: Mapping[str, Any]) -> tuple[dict[str, Any], Checks]:
        params = hf.get("rope_parameters") or {}
        out, checks = self.full.from_hf({self.full.base: self.full_default, **hf,
                                         "rope_parameters": params.get(GLOBAL)})
        local, local_checks = self.sliding.from_hf({self.sliding.base: self.sliding_default, **hf,
                                                    "rope_scaling": None,  # 4.x: the global layers'
                                                    "rope_parameters": params.get(LOCAL)})
        checks.update({f"{LOCAL} {k}": v for k, v in local_checks.items()})
        checks["rope_parameters per layer type"] = (set(params) <= {LOCAL, GLOBAL}, True)
        return {**out, "positional.local_base": local["positional.base"]}, checks

    def to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        rope = cfg.positional
        local = rope.base if rope.local_base is None else rope.local_base
        return {"rope_parameters": {GLOBAL: self.full.to_hf(cfg)["rope_parameters"],
                                    LOCAL: {"rope_type": "default", "rope_theta": local}}}


class Gemma3(Gemma2):
    model_type = "gemma3_text"
    class_prefix = "Gemma3"
    heads = {head: LLAMA_HEADS[head] for head in ("lm", "none", "classifier")}
    defaults = {**Gemma.defaults, "max_position_embeddings": 131072}
    fixed = {**Gemma2.fixed, "mixer.qk_norm": True}
    softcaps = {"attn_logit_softcapping": None, "final_logit_softcapping": None}
    rope = LayerTypeRope()

    def classes(self) -> dict[str, str]:
        """The text classes (Gemma3Model and Gemma3ForSequenceClassification are the multimodal ones)."""
        return {"Gemma3ForCausalLM": "lm", "Gemma3TextModel": "none",
                "Gemma3TextForSequenceClassification": "classifier"}

    def global_period(self, hf: Mapping[str, Any]) -> int:
        return hf.get("sliding_window_pattern", 6)  # a 4.x key; transformers 5 writes layer_types

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)
        local_base = more["positional.local_base"]
        same = local_base == more["positional.base"] and more["positional.scaling.name"] == "none"
        return {**more, "positional.local_base": None if same or not more["mixer.sliding_window"]
                else local_base}, checks
