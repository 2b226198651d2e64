"""Phi-3: Mistral's layout (no biases, optional `sliding_window` on every layer) with q/k/v fused in one
`qkv_proj` ([q | k | v] rows, zoo's own layout) and gate/up in one `gate_up_proj` ([gate | up], zoo's gated
`ffn.up`). `partial_rotary_factor` rotates the first features of each head (zoo: `rope_fraction`). Only the
plain RoPE frequencies: `longrope` (Phi-3 128k, Phi-3.5, Phi-4-mini; 4.x `su` / `yarn`) is refused."""

from __future__ import annotations

from zoo.config import ModelConfig
from zoo.pretrained.decoder_heads import NO_QA
from zoo.pretrained.decoder_tensors import Linears
from zoo.pretrained.family import FAMILIES
from zoo.pretrained.mistral import Mistral


@FAMILIES.register("phi3")
class Phi3(Mistral):
    model_type = "phi3"
    architecture = "Phi3ForCausalLM"
    class_prefix = "Phi3"
    heads = NO_QA  # transformers has no Phi3ForQuestionAnswering
    hf_defaults = {"max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "sliding_window": None}
    rope_types = {"default": "none"}
    partial_rotary = True

    def linears(self, cfg: ModelConfig, h: str) -> Linears:
        q_dim, kv_dim = cfg.n_heads * cfg.head_size, cfg.kv_heads * cfg.head_size
        return {**super().linears(cfg, h),
                "self_attn.qkv": ([f"{h}.self_attn.qkv_proj"], [q_dim + 2 * kv_dim], cfg.d_model, cfg.use_qkv_bias),
                "ffn.up": ([f"{h}.mlp.gate_up_proj"], [2 * cfg.ffn_dim], cfg.d_model, cfg.bias)}
