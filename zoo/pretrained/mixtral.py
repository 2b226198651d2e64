"""Mixtral (Mistral's decoder with a sparse Mixture-of-Experts MLP in every layer) both ways: Mistral's
tables, `block_sparse_moe.gate` as the router (top-k logits, softmax over them: zoo's `topk_softmax`) and
`block_sparse_moe.experts.{e}.w1 / w3 / w2` (gate / up / down) as each expert's `[gate | value]` up and down
projections, the layout the checkpoints on the Hub and transformers' save_pretrained use. transformers'
`router_aux_loss_coef` weighs a loss `num_experts_per_tok` times zoo's `aux` (docs/moe.md), so balance.aux
is it times top_k. `router_jitter_noise` (training-only noise) is reproduced at 0 only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import moe_paths
from zoo.pretrained.decoder_heads import LLAMA_HEADS, QA
from zoo.pretrained.family import Checks
from zoo.pretrained.llama import DECODER, KEYS, TENSORS, WINDOW, LlamaShaped
from zoo.pretrained.tensor_map import within

EXPERTS = {  # zoo -> HF inside a layer
    "ffn.router.proj.weight": "block_sparse_moe.gate.weight",
    "ffn.experts.{e}.up.weight": ("block_sparse_moe.experts.{e}.w1.weight",
                                  "block_sparse_moe.experts.{e}.w3.weight"),
    "ffn.experts.{e}.down.weight": "block_sparse_moe.experts.{e}.w2.weight",
}


class Mixtral(LlamaShaped):
    model_type = "mixtral"
    class_prefix = "Mixtral"
    heads = {**LLAMA_HEADS, "qa": QA}  # MixtralForQuestionAnswering keeps its base under `model.`
    keys = (*KEYS, WINDOW)
    fixed = {**DECODER, "ffn": "moe"}
    defaults = {"max_position_embeddings": 4096 * 32, "sliding_window": None}
    requires = {"router_jitter_noise": 0.0}
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", EXPERTS)}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        rope, checks = super().more_from_hf(hf, settings)
        top_k = hf.get("num_experts_per_tok", 2)
        moe = {"n_experts": hf.get("num_local_experts", 8), "top_k": top_k, "router": "topk_softmax",
               "balance": {"aux": hf.get("router_aux_loss_coef", 0.001) * top_k}}
        return {**rope, **moe_paths(moe)}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        moe = cfg.ffn
        coef = moe.balance.get("aux", 0.0) / moe.top_k
        return {**super().more_to_hf(cfg), "num_local_experts": moe.n_experts,
                "num_experts_per_tok": moe.top_k, "router_aux_loss_coef": coef, "output_router_logits": False}
