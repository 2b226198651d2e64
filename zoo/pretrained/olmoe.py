"""OLMoE both ways: Llama's pre-norm decoder with OLMo 2's q/k RMSNorm over the whole projections
(model.mixer.qk_norm_scope: all) and a Mixture-of-Experts MLP in every layer: `mlp.gate` routes (softmax,
top-k, renormalised only with `norm_topk_prob`), experts `mlp.experts.{e}.gate_proj | up_proj | down_proj` of
width `intermediate_size`. `clip_qkv` and `attention_bias` are reproduced at null / false only;
`router_aux_loss_coef` is balance.aux / top_k (docs/moe.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import moe_paths
from zoo.pretrained.decoder_heads import NO_QA
from zoo.pretrained.family import Checks
from zoo.pretrained.llama import DECODER, TENSORS, LlamaShaped
from zoo.pretrained.qwen_moe import EXPERTS, ROUTERS
from zoo.pretrained.tensor_map import within


class Olmoe(LlamaShaped):
    model_type = "olmoe"
    class_prefix = "Olmoe"
    heads = {head: NO_QA[head] for head in ("none", "lm")}  # OlmoeModel, OlmoeForCausalLM only
    fixed = {**DECODER, "mixer.qk_norm": True, "mixer.qk_norm_scope": "all", "ffn": "moe"}
    defaults = {"max_position_embeddings": 4096, "rms_norm_eps": 1e-5}
    requires = {"attention_bias": False, "clip_qkv": None}
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", EXPERTS)}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        rope, checks = super().more_from_hf(hf, settings)
        top_k = hf.get("num_experts_per_tok", 8)
        moe = {"n_experts": hf.get("num_experts", 64), "top_k": top_k,
               "router": ROUTERS[bool(hf.get("norm_topk_prob", False))],
               "balance": {"aux": hf.get("router_aux_loss_coef", 0.01) * top_k}}
        return {**rope, **moe_paths(moe)}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        moe = cfg.ffn
        return {**super().more_to_hf(cfg), "num_experts": moe.n_experts, "num_experts_per_tok": moe.top_k,
                "norm_topk_prob": moe.router.name == ROUTERS[True], "output_router_logits": False,
                "router_aux_loss_coef": moe.balance.get("aux", 0.0) / moe.top_k}
