"""Qwen2-MoE and Qwen3-MoE both ways: Qwen2's / Qwen3's attention and tables, and a Mixture-of-Experts MLP
where `decoder_sparse_step` and `mlp_only_layers` say (zoo's model.layer_pattern: each layer tagged moe or
dense as transformers builds it, written back as `mlp_only_layers` with a step of 1). The router is `mlp.gate`
(softmax, top-k, renormalised when `norm_topk_prob`: zoo's softmax_topk_norm, else softmax_topk), each expert
`mlp.experts.{e}.gate_proj | up_proj | down_proj` of width `moe_intermediate_size` (the dense layers keep
`intermediate_size`). Qwen2-MoE adds one shared expert of width `shared_expert_intermediate_size` (zoo:
n_shared_experts = that / moe_intermediate_size, which must divide it) scaled by
sigmoid(`mlp.shared_expert_gate`). `router_aux_loss_coef` is balance.aux / top_k (docs/moe.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import Key, moe_paths, with_tags
from zoo.pretrained.decoder_heads import LLAMA_HEADS, QA
from zoo.pretrained.family import Checks
from zoo.pretrained.llama import DECODER, KEYS, TENSORS, Qwen2, Qwen3
from zoo.pretrained.tensor_map import within

EXPERTS = {  # zoo -> HF inside a layer
    "ffn.router.proj.weight": "mlp.gate.weight",
    "ffn.experts.{e}.up.weight": ("mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight"),
    "ffn.experts.{e}.down.weight": "mlp.experts.{e}.down_proj.weight",
    "ffn.shared.up.weight": ("mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight"),
    "ffn.shared.down.weight": "mlp.shared_expert.down_proj.weight",
    "ffn.shared_gate.weight": "mlp.shared_expert_gate.weight",
}
ROUTERS = {False: "softmax_topk", True: "softmax_topk_norm"}  # norm_topk_prob -> zoo router


class QwenExperts:
    """The MoE config keys both Qwen MoE families share; `shared`: whether the family has a shared expert."""

    shared = False

    def moe_from_hf(self, hf: Mapping[str, Any], n_layers: int) -> tuple[dict[str, Any], list[str], Checks]:
        """model.ffn's MoE keys, which layers are MoE ("moe" or "dense" per layer), and the checks."""
        top_k, width = hf.get("num_experts_per_tok", 8), hf.get("moe_intermediate_size", 768)
        dense, step = set(hf.get("mlp_only_layers") or []), hf.get("decoder_sparse_step", 1)
        stepped = isinstance(step, int) and not isinstance(step, bool) and step >= 1
        layers = ["moe" if i not in dense and (i + 1) % (step if stepped else 1) == 0 else "dense"
                  for i in range(n_layers)]
        moe = {"n_experts": hf.get("num_experts", hf.get("num_local_experts", 128)), "top_k": top_k,
               "expert_d_ff": width, "router": ROUTERS[bool(hf.get("norm_topk_prob", False))],
               "balance": {"aux": hf.get("router_aux_loss_coef", 0.001) * top_k}}
        checks: Checks = {"decoder_sparse_step (a positive integer)": (stepped, True)}
        if self.shared:
            shared = hf.get("shared_expert_intermediate_size", 0)
            checks["shared_expert_intermediate_size a multiple of moe_intermediate_size"] = (
                shared % width == 0 if width else False, True)
            moe.update(n_shared_experts=shared // width if width else 0, shared_gate=shared > 0)
        return moe, layers, checks

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)  # the attention family's (Qwen2 / Qwen3)
        moe, layers, moe_checks = self.moe_from_hf(hf, settings["n_layers"])
        return ({**more, **moe_paths(moe), "layer_pattern": with_tags(more["layer_pattern"], layers, "moe")},
                {**checks, **moe_checks})

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {**super().more_to_hf(cfg), **self.moe_to_hf(cfg)}

    def moe_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        moe = cfg.ffn
        width = moe.expert_d_ff or cfg.ffn_dim
        out = {"num_experts": moe.n_experts, "num_experts_per_tok": moe.top_k, "moe_intermediate_size": width,
               "norm_topk_prob": moe.router.name == ROUTERS[True], "decoder_sparse_step": 1,
               "mlp_only_layers": [i for i in range(cfg.n_layers) if not cfg.layer_is_moe(i)],
               "output_router_logits": False,
               "router_aux_loss_coef": moe.balance.get("aux", 0.0) / moe.top_k}
        if self.shared:
            out["shared_expert_intermediate_size"] = moe.n_shared_experts * width
        return out


class Qwen2Moe(QwenExperts, Qwen2):
    """Without `layer_types`, Qwen2MoeConfig slides on the even layers below `max_window_layers`."""

    model_type = "qwen2_moe"
    class_prefix = "Qwen2Moe"
    shared = True
    heads = {**LLAMA_HEADS, "qa": QA}  # Qwen2MoeForQuestionAnswering keeps its base under `model.`
    keys = (*KEYS, Key("mixer.qkv_bias", "qkv_bias", True))
    fixed = {**DECODER, "ffn": "moe"}
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", EXPERTS)}

    def layer_kinds(self, hf: Mapping[str, Any], n_layers: int) -> list[str]:
        first = hf.get("max_window_layers", 28)
        return [self.KINDS[i % 2 == 0 and i < first] for i in range(n_layers)]


class Qwen3Moe(QwenExperts, Qwen3):
    """Qwen3's attention (q/k RMSNorm per head); head_dim defaults to hidden_size / heads, as its config. Its
    window is on every layer or none (transformers' Qwen3MoE reads no `layer_types`)."""

    model_type = "qwen3_moe"
    class_prefix = "Qwen3Moe"
    fixed = {**Qwen3.fixed, "ffn": "moe"}
    defaults = Qwen2.defaults
    tensors = Qwen2Moe.tensors
    reads_layer_types = False

    def layer_kinds(self, hf: Mapping[str, Any], n_layers: int) -> list[str]:
        return [self.KINDS[1]] * n_layers
