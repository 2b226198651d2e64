"""gpt-oss (OpenAI's open-weight MoE decoders) both ways: Llama's pre-norm RMSNorm decoder with
- biases on q, k, v and o, and a learned sink logit per head (`self_attn.sinks`; zoo's `model.mixer.sinks`);
- sliding-window layers where `layer_types` says (by default every other one, starting with layer 0: zoo's
  `model.layer_pattern: [local, global]`), `sliding_window` 128;
- YaRN RoPE (rotate-half) as its config says: factor 32 over 4096 positions, base 150000, `truncate: false`;
- a Mixture-of-Experts MLP in every layer: `mlp.router` a biased linear map (top-k logits, softmax over them:
  zoo's `topk_softmax` with `router_bias`), experts with biases whose activation is the clamped SwiGLU
  (`swiglu_clamped`, `swiglu_alpha` 1.702 and `swiglu_limit` 7.0 only).
The experts are stored fused per layer, `mlp.experts.gate_up_proj` (E, C, 2F) with the gate in the even
columns and the value in the odd ones, `gate_up_proj_bias` (E, 2F), `down_proj` (E, F, C), `down_proj_bias`
(E, C); zoo keeps one FeedForward per expert ([gate | value] rows), so they are read and written by hand
(`read_first`, `state_to_hf`). The Hub's MXFP4 checkpoints (`quantization_config.quant_method: mxfp4`,
`*_blocks` / `*_scales` tensors) are dequantized on load (mxfp4.py). `router_aux_loss_coef` is
aux_coef / top_k (docs/moe.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.config_map import Key, moe_paths
from zoo.pretrained.decoder_heads import NO_QA
from zoo.pretrained.family import Checks
from zoo.pretrained.gemma import every_kth_global, layer_types, read_layer_types
from zoo.pretrained.llama import DECODER, KEYS, TENSORS, LlamaShaped
from zoo.pretrained.mxfp4 import BLOCK, unpack
from zoo.pretrained.tensor_map import HFTensors, stored_name, within

ATTENTION_AND_ROUTER = {  # zoo -> HF inside a layer (the experts: `expert_tensors`)
    "self_attn.sinks": "self_attn.sinks",
    "ffn.router.proj.{p}": "mlp.router.{p}",
}
EXPERTS = "layers.{i}.mlp.experts."  # + gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias
ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 4096}  # GptOssConfig's when config.json gives none
ACTIVATION = Key("activation", "hidden_act", "silu", {"silu": "swiglu_clamped"})  # the experts' activation


class GptOss(LlamaShaped):
    model_type = "gpt_oss"
    class_prefix = "GptOss"
    heads = NO_QA  # GptOssModel, ForCausalLM, ForSequenceClassification, ForTokenClassification
    keys = tuple(ACTIVATION if k.zoo == "activation" else k for k in KEYS)
    defaults = {"head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
                "bos_token_id": None}  # GptOssConfig's (its eos and pad are none too; zoo keeps Llama's 2, 0)
    fixed = {**DECODER, "bias": True, "mixer.sinks": True, "ffn": "moe"}
    requires = {"attention_bias": True, "swiglu_alpha": 1.702, "swiglu_limit": 7.0}
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", ATTENTION_AND_ROUTER)}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        given = hf.get("rope_parameters") or hf.get("rope_scaling")
        rope, checks = super().more_from_hf({"rope_theta": 150000.0, **hf, "rope_parameters": given or ROPE},
                                            settings)
        n = settings["n_layers"]
        types = hf.get("layer_types") or every_kth_global(n, 2)
        window, window_checks = read_layer_types(types, n, hf.get("sliding_window", 128))
        quant = hf.get("quantization_config") or {}
        quantized = quant.get("quant_method") if isinstance(quant, Mapping) else None
        checks.update({
            "quantization_config is a mapping": (isinstance(quant, Mapping), True),
            "quantization_config.quant_method": (quantized, (None, "mxfp4")),  # mxfp4: dequantized on load
            **window_checks,
        })
        top_k = hf.get("num_experts_per_tok", 4)
        moe = {"n_experts": hf.get("num_local_experts", 128), "top_k": top_k, "router": "topk_softmax",
               "router_bias": True, "balance": {"aux": hf.get("router_aux_loss_coef", 0.001) * top_k}}
        return {**rope, **moe_paths(moe), **window}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        moe, window = cfg.ffn, cfg.mixer.sliding_window
        return {**super().more_to_hf(cfg), "num_local_experts": moe.n_experts,
                "num_experts_per_tok": moe.top_k,
                "router_aux_loss_coef": moe.balance.get("aux", 0.0) / moe.top_k,
                "output_router_logits": False,
                # without local layers transformers still builds a sliding mask: it needs a window
                "sliding_window": cfg.max_seq_len if window is None else window,
                "layer_types": layer_types(cfg)}

    # ----- the fused experts -----
    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        out = super().read_first(src, cfg)
        moe = cfg.ffn
        e, c, f = moe.n_experts, cfg.d_model, moe.expert_d_ff or cfg.ffn_dim
        for i in range(cfg.n_layers):
            hf, zoo = EXPERTS.format(i=i), f"decoder_stack.layers.{i}.ffn.experts."
            gate_up = expert_matrix(src, hf + "gate_up_proj", (e, c, 2 * f))  # gate even, value odd columns
            gate_up_bias = src.take(hf + "gate_up_proj_bias", (e, 2 * f))
            down = expert_matrix(src, hf + "down_proj", (e, f, c))
            down_bias = src.take(hf + "down_proj_bias", (e, c))
            for x in range(e):
                out[f"{zoo}{x}.up.weight"] = torch.cat([gate_up[x, :, 0::2], gate_up[x, :, 1::2]], 1).t()
                out[f"{zoo}{x}.up.bias"] = torch.cat([gate_up_bias[x, 0::2], gate_up_bias[x, 1::2]])
                out[f"{zoo}{x}.down.weight"] = down[x].t()
                out[f"{zoo}{x}.down.bias"] = down_bias[x]
        return out

    def state_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        out = super().state_to_hf(state, cfg)
        prefix = self.base_prefix(cfg)
        n_experts = cfg.ffn.n_experts
        for i in range(cfg.n_layers):
            zoo = f"decoder_stack.layers.{i}.ffn.experts."
            up = torch.stack([state[f"{zoo}{x}.up.weight"].t() for x in range(n_experts)])  # (E, C, 2F)
            up_bias = torch.stack([state[f"{zoo}{x}.up.bias"] for x in range(n_experts)])  # (E, 2F)
            f = up.shape[-1] // 2
            gate_up, gate_up_bias = torch.empty_like(up), torch.empty_like(up_bias)
            gate_up[..., 0::2], gate_up[..., 1::2] = up[..., :f], up[..., f:]
            gate_up_bias[..., 0::2], gate_up_bias[..., 1::2] = up_bias[..., :f], up_bias[..., f:]
            name = stored_name(EXPERTS.format(i=i), prefix)
            out.update({name + "gate_up_proj": gate_up, name + "gate_up_proj_bias": gate_up_bias,
                        name + "down_proj": torch.stack([state[f"{zoo}{x}.down.weight"].t()
                                                         for x in range(n_experts)]),
                        name + "down_proj_bias": torch.stack([state[f"{zoo}{x}.down.bias"]
                                                              for x in range(n_experts)])})
        return out


def expert_matrix(src: HFTensors, name: str, shape: tuple[int, int, int]) -> torch.Tensor:
    """The fused expert matrix `name` (E, in, out): stored as it is, or (MXFP4) as `name_blocks` /
    `name_scales` of its transpose (E, out, in), dequantized here."""
    if not src.has(name + "_blocks"):
        return src.take(name, shape)
    e, n_in, n_out = shape
    if n_in % BLOCK:
        raise ValueError(f"{src.source}: {name}_blocks packs rows of {n_in} values in MXFP4 blocks of "
                         f"{BLOCK}; {n_in} is not a multiple of {BLOCK}.")
    blocks = src.take(name + "_blocks", (e, n_out, n_in // BLOCK, BLOCK // 2))
    scales = src.take(name + "_scales", (e, n_out, n_in // BLOCK))
    # one expert at a time: unpacking indexes a code table, whose index tensor is 8 bytes a value
    return torch.stack([unpack(blocks[x], scales[x]).t() for x in range(e)])  # (E, in, out)
