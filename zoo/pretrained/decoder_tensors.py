"""Tensor moving for the Llama-layout decoders (Llama, Mistral, Qwen, Phi-3, Gemma, Gemma 2): `model.embed_tokens`,
`model.layers.{i}.*`, `model.norm`, then the head the folder's class says (decoder_heads.py: `lm_head`, `score`,
`qa_outputs`, none). A family says which HF matrices zoo stacks in each of its linears (`linears`) and which
tensors it takes unchanged (`layer_tensors`); the loops here do the rest both ways."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from zoo.config import ModelConfig
from zoo.pretrained.decoder_heads import LLAMA_HEADS
from zoo.pretrained.family import HFTensors
from zoo.pretrained.heads import HeadedFamily

# zoo linear -> (the HF matrices stacked in its rows, their row counts, input size, whether it has a bias)
Linears = dict[str, tuple[list[str], list[int], int, bool]]


class DecoderTensors(HeadedFamily):
    """base_from_hf / base_to_hf from the two per-layer hooks below; the heads from `heads`."""

    lm_suffixes = ("ForCausalLM",)
    prefixes = ("model.", "transformer.")  # *ForCausalLM, *ForSequenceClassification, ...; LlamaForQuestionAnswering
    heads = LLAMA_HEADS

    def linears(self, cfg: ModelConfig, h: str) -> Linears:
        """zoo linear of layer `h` -> (the HF matrices stacked in its rows, their row counts, input size, bias).
        Llama's: q/k/v stacked as zoo's [q | k | v] rows, gate/up as [gate | value]."""
        d, f = cfg.d_model, cfg.ffn_dim
        q_dim, kv_dim = cfg.n_heads * cfg.head_size, cfg.kv_heads * cfg.head_size
        return {
            "self_attn.qkv": ([f"{h}.self_attn.{p}_proj" for p in "qkv"], [q_dim, kv_dim, kv_dim], d, cfg.use_qkv_bias),
            "self_attn.o": ([f"{h}.self_attn.o_proj"], [d], q_dim, cfg.bias),
            "ffn.up": ([f"{h}.mlp.gate_proj", f"{h}.mlp.up_proj"], [f, f], d, cfg.bias),
            "ffn.down": ([f"{h}.mlp.down_proj"], [d], f, cfg.bias),
        }

    def layer_tensors(self, cfg: ModelConfig, h: str) -> dict[str, tuple[str, tuple[int, ...]]]:
        """zoo tensor of layer `h` -> (the HF tensor it is, unchanged, and its shape). Llama's two norms."""
        return {"norm_self.weight": (f"{h}.input_layernorm.weight", (cfg.d_model,)),
                "norm_ffn.weight": (f"{h}.post_attention_layernorm.weight", (cfg.d_model,))}

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        d = cfg.d_model
        out = {"embed.tokens.weight": src.take_token_table("embed_tokens.weight", cfg)}  # (vocab_size, d)
        for i in range(cfg.n_layers):
            z, h = f"decoder_stack.layers.{i}", f"layers.{i}"
            for name, (names, rows, d_in, bias) in self.linears(cfg, h).items():
                pairs = list(zip(names, rows, strict=True))
                out[f"{z}.{name}.weight"] = torch.cat([src.take(f"{n}.weight", (r, d_in)) for n, r in pairs])
                if bias:
                    out[f"{z}.{name}.bias"] = torch.cat([src.take(f"{n}.bias", (r,)) for n, r in pairs])
            for name, (hf_name, shape) in self.layer_tensors(cfg, h).items():
                out[f"{z}.{name}"] = src.take(hf_name, shape)
        out["decoder_stack.final_norm.weight"] = src.take("norm.weight", (d,))
        return out

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}embed_tokens.weight": state["embed.tokens.weight"],
               f"{prefix}norm.weight": state["decoder_stack.final_norm.weight"]}
        for i in range(cfg.n_layers):
            z, h = f"decoder_stack.layers.{i}", f"{prefix}layers.{i}"
            for name, (names, rows, _, bias) in self.linears(cfg, h).items():
                for part in ("weight", "bias") if bias else ("weight",):
                    for hf_name, chunk in zip(names, state[f"{z}.{name}.{part}"].split(rows), strict=True):
                        out[f"{hf_name}.{part}"] = chunk
            for name, (hf_name, _) in self.layer_tensors(cfg, h).items():
                out[hf_name] = state[f"{z}.{name}"]
        return out
