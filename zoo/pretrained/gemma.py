"""Gemma: a Llama-shaped decoder with Gemma's own details: RMSNorm with a (1 + w) gain (`rmsnorm_1p`; HF
stores w), a tanh-GELU gate (`geglu_tanh`), token embeddings times sqrt(hidden) (`embed_scale`), an explicit
head size, a tied head, no biases. HF keeps q/k/v and gate/up as separate matrices; zoo fuses them as
[q | k | v] and [gate | value]. Gemma 2 (gemma2.py) extends this class with its sandwich norms, soft caps and
sliding window."""

from __future__ import annotations

from typing import Any

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.decoder_heads import NO_QA
from zoo.pretrained.decoder_tensors import DecoderTensors
from zoo.pretrained.family import FAMILIES, require, special_id, unsupported


def rope_base(hf: dict[str, Any], model_type: str) -> float:
    """rope_theta from transformers 5's `rope_parameters` or 4.x's top-level key. Gemma uses plain RoPE: any
    frequency scaling is named as unsupported."""
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    extra = sorted(set(params) - {"rope_type", "type", "rope_theta"})
    require(hf, model_type, {"rope_parameters.rope_type": (rope_type, "default"),
                             "rope_parameters keys besides rope_theta": (extra, [])})
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


@FAMILIES.register("gemma")
class Gemma(DecoderTensors):
    model_type = "gemma"
    architecture = "GemmaForCausalLM"
    class_prefix = "Gemma"
    heads = NO_QA  # transformers has no Gemma(2)ForQuestionAnswering
    # config.json key of the MLP activation -> its values zoo reproduces (transformers 5 reads Gemma's legacy
    # "gelu" as the tanh approximation too, GemmaConfig.__post_init__); exports write "gelu_pytorch_tanh"
    activation_key = "hidden_act"
    activations = ("gelu_pytorch_tanh", "gelu")
    legacy_activation_key: str | None = "hidden_activation"  # transformers 4.x ran this one instead when set
    norm_placement = "pre"
    layer_norms = {"input_layernorm": "norm_self", "post_attention_layernorm": "norm_ffn"}  # HF -> zoo, per layer

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        return ModelConfig(**self.knobs(hf), **self.head_config(hf))

    def knobs(self, hf: dict[str, Any]) -> dict[str, Any]:
        """ModelConfig fields for config.json (absent keys take transformers' defaults); raises naming every
        setting zoo cannot reproduce."""
        act = hf.get(self.activation_key, "gelu_pytorch_tanh")
        checks = {
            f"{self.activation_key} in ({', '.join(self.activations)})": (act in self.activations, True),
            "attention_bias": (hf.get("attention_bias", False), False),
            "use_bidirectional_attention": (bool(hf.get("use_bidirectional_attention")), False),
        }
        if self.legacy_activation_key:
            checks[self.legacy_activation_key] = (hf.get(self.legacy_activation_key) or "gelu_pytorch_tanh",
                                                  "gelu_pytorch_tanh")
        require(hf, self.model_type, checks)
        d, heads, vocab = hf["hidden_size"], hf["num_attention_heads"], hf["vocab_size"]
        return dict(
            arch="decoder", vocab_size=vocab, d_model=d, n_layers=hf["num_hidden_layers"], n_heads=heads,
            n_kv_heads=hf.get("num_key_value_heads") or heads, head_dim=hf.get("head_dim", 256),
            d_ff=hf["intermediate_size"], activation="geglu_tanh", norm="rmsnorm_1p",
            norm_eps=hf.get("rms_norm_eps", 1e-6), norm_placement=self.norm_placement, embed_scale=True,
            positional="rope", rope_layout="half", rope_base=rope_base(hf, self.model_type),
            max_seq_len=hf.get("max_position_embeddings", 8192), dropout=0.0,
            attn_dropout=hf.get("attention_dropout", 0.0), bias=False,
            tie_embeddings=hf.get("tie_word_embeddings", True), pad_id=special_id(hf, "pad_token_id", vocab, 0),
            bos_id=special_id(hf, "bos_token_id", vocab, 2), eos_id=special_id(hf, "eos_token_id", vocab, 1),
        )

    def export_checks(self, cfg: ModelConfig) -> dict[str, tuple[Any, Any]]:
        """{zoo key: (value, the value this family needs)} for `unsupported`."""
        return {
            "arch": (cfg.arch, "decoder"), "norm": (cfg.norm, "rmsnorm_1p"),
            "norm_placement": (cfg.norm_placement, self.norm_placement), "activation": (cfg.activation, "geglu_tanh"),
            "positional": (cfg.positional, "rope"), "rope_layout": (cfg.rope_layout, "half"),
            "rope_fraction": (cfg.rope_fraction, 1.0), "rope_scaling": (cfg.rope_scaling, "none"),
            "embed_scale": (cfg.embed_scale, True), "embed_norm": (cfg.embed_norm, False),
            "use_final_norm": (uses_final_norm(cfg), True), "bias": (cfg.bias, False),
            "qkv_bias": (cfg.use_qkv_bias, False), "qk_norm": (cfg.qk_norm, False), "residual": (cfg.residual, True),
            "ffn": (cfg.ffn, "mlp"), "type_vocab_size": (cfg.type_vocab_size, 0),
            "head_transform": (cfg.head_transform, False), "head_bias": (cfg.head_bias, False),
            "attn_scale": (cfg.attn_scale, None), "attn_softcap": (cfg.attn_softcap, None),
            "final_softcap": (cfg.final_softcap, None), "sliding_window": (cfg.sliding_window, None),
        }

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        unsupported(cfg, self.model_type, self.export_checks(cfg))
        return {
            "model_type": self.model_type, **self.head_to_hf(cfg), "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_size, "intermediate_size": cfg.ffn_dim,
            self.activation_key: "gelu_pytorch_tanh", "rms_norm_eps": cfg.norm_eps,
            "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_base}, "rope_theta": cfg.rope_base,
            "max_position_embeddings": cfg.max_seq_len, "attention_bias": False,
            "attention_dropout": cfg.attention_dropout, "tie_word_embeddings": cfg.tie_embeddings,
            "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id, "pad_token_id": cfg.pad_id,
        }

    def layer_tensors(self, cfg: ModelConfig, h: str) -> dict[str, tuple[str, tuple[int, ...]]]:
        return {f"{norm}.weight": (f"{h}.{hf_norm}.weight", (cfg.d_model,)) for hf_norm, norm in self.layer_norms.items()}
