"""BART: encoder-decoder, post-LN, learned positions offset by 2, LayerNorm after both embeddings,
optional sqrt(d_model) embedding scale, one shared token table, `final_logits_bias` as the head bias.
`Seq2SeqFamily` holds the layer mapping and the heads that Marian reuses: the bare BartModel (the decoder's
hidden states and the encoder's, names without `model.`) and BartForConditionalGeneration. BART's sequence
classification and QA classes read the decoder's output at the last `eos`, which zoo's encoder_decoder
heads (lm, none) do not express; they are named in the error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.decoder_heads import BARE, CausalLMLayout
from zoo.pretrained.family import (
    FAMILIES,
    ZOO_TO_HF_ACTIVATION,
    HFTensors,
    hf_activation,
    require,
    special_id,
    unsupported,
)
from zoo.pretrained.heads import HeadedFamily, stored_name

# zoo sub-module -> HF sub-module inside `{encoder,decoder}.layers.{i}.` (self q/k/v and cross k/v fused)
_LAYER = {
    "self_attn.o": "self_attn.out_proj",
    "norm_self": "self_attn_layer_norm",
    "ffn.up": "fc1",
    "ffn.down": "fc2",
    "norm_ffn": "final_layer_norm",
}
_CROSS = {"cross_attn.q": "encoder_attn.q_proj", "cross_attn.o": "encoder_attn.out_proj", "norm_cross": "encoder_attn_layer_norm"}


def _pair(src: HFTensors, name: str, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    return src.take(f"{name}.weight", shape), src.take(f"{name}.bias", shape[:1])


@dataclass(frozen=True)
class BiasedLMLayout(CausalLMLayout):
    """The LM head of BART and Marian: `lm_head` (tied to the target token table unless config.json unties it)
    plus `final_logits_bias` (1, V) as its bias; a zoo model without head bias exports an all-zero one."""

    bias: str = "~final_logits_bias"
    tokens: str = "tgt_embed.tokens.weight"

    def origins(self) -> dict[str, str]:
        return {**super().origins(), "head.proj.bias": self.bias}

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor]) -> None:
        out["head.proj.bias"] = src.take(self.bias, (1, cfg.vocab_size))[0]
        super().from_hf(src, cfg, out)

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str,
              out: dict[str, torch.Tensor]) -> None:
        bias = state.get("head.proj.bias")
        out[stored_name(self.bias, prefix)] = (bias if bias is not None else torch.zeros(cfg.vocab_size))[None]
        super().to_hf(state, cfg, prefix, out)


SEQ2SEQ_NOT_LOADED = {  # class-name suffix -> why zoo does not load it
    "ForSequenceClassification": "it classifies the decoder's output at the last eos token, and zoo's "
                                 "encoder_decoder carries model.head=lm | none",
    "ForQuestionAnswering": "it reads start/end logits from the decoder's output, and zoo's encoder_decoder "
                            "carries model.head=lm | none",
    "ForCausalLM": "the decoder alone (with cross-attention layers) is not a zoo model",
}


class Seq2SeqFamily(HeadedFamily):
    """BART-layout encoder-decoder; subclasses say how embeddings and positions are stored."""

    same_model = frozenset({"head_bias"})  # no head bias is written as a zero final_logits_bias
    prefixes = ("model.",)
    lm_suffixes = ("ForConditionalGeneration",)
    heads = {"none": BARE, "lm": BiasedLMLayout("lm", proj="~lm_head")}

    def base_config(self, hf: dict[str, Any], **knobs: Any) -> ModelConfig:
        model_type = hf["model_type"]
        require(hf, model_type, {
            "decoder_attention_heads": (hf.get("decoder_attention_heads"), hf.get("encoder_attention_heads")),
            "decoder_ffn_dim": (hf.get("decoder_ffn_dim"), hf.get("encoder_ffn_dim")),
        })
        vocab = hf["vocab_size"]
        eos = special_id(hf, "eos_token_id", vocab, 2)
        return ModelConfig(
            arch="encoder_decoder", vocab_size=vocab, d_model=hf["d_model"], n_layers=hf["encoder_layers"],
            encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"],
            n_heads=hf["encoder_attention_heads"], d_ff=hf["encoder_ffn_dim"],
            activation=hf_activation(hf.get("activation_function", "gelu"), model_type), norm="layernorm",
            norm_eps=1e-5, norm_placement="post", final_norm=False, embed_scale=bool(hf.get("scale_embedding", False)),
            max_seq_len=hf["max_position_embeddings"], dropout=hf.get("dropout", 0.1),
            attn_dropout=hf.get("attention_dropout", 0.0), bias=True, head_bias=True,
            tie_embeddings=hf.get("tie_word_embeddings", True), pad_id=special_id(hf, "pad_token_id", vocab, 1),
            bos_id=special_id(hf, "bos_token_id", vocab, 0), eos_id=eos,
            decoder_start_id=special_id(hf, "decoder_start_token_id", vocab, None), **knobs, **self.head_config(hf),
        )

    def base_hf_config(self, cfg: ModelConfig, checks: dict[str, tuple[Any, Any]], **extra: Any) -> dict[str, Any]:
        """The config.json keys BART and Marian share; `checks` adds the family's own export guards."""
        unsupported(cfg, self.model_type, {
            "arch": (cfg.arch, "encoder_decoder"), "norm": (cfg.norm, "layernorm"), "norm_eps": (cfg.norm_eps, 1e-5),
            "norm_placement": (cfg.norm_placement, "post"), "use_final_norm": (uses_final_norm(cfg), False),
            "bias": (cfg.bias, True), "n_kv_heads": (cfg.kv_heads, cfg.n_heads),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True), "residual": (cfg.residual, True),
            "ffn": (cfg.ffn, "mlp"), "type_vocab_size": (cfg.type_vocab_size, 0),
            "head_transform": (cfg.head_transform, False), **checks,
        })
        return {
            "model_type": self.model_type, **self.head_to_hf(cfg), "vocab_size": cfg.vocab_size,
            "d_model": cfg.d_model, "encoder_layers": cfg.n_encoder_layers, "decoder_layers": cfg.n_decoder_layers,
            "encoder_attention_heads": cfg.n_heads, "decoder_attention_heads": cfg.n_heads,
            "encoder_ffn_dim": cfg.ffn_dim, "decoder_ffn_dim": cfg.ffn_dim,
            "activation_function": ZOO_TO_HF_ACTIVATION[cfg.activation], "max_position_embeddings": cfg.max_seq_len,
            "scale_embedding": cfg.embed_scale, "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
            "activation_dropout": 0.0, "tie_word_embeddings": cfg.tie_embeddings, "pad_token_id": cfg.pad_id,
            "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id, "forced_eos_token_id": cfg.eos_id,
            "decoder_start_token_id": cfg.start_id, "is_encoder_decoder": True, **extra,
        }

    # ----- layers (shared by BART and Marian) -----
    def layers_from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor]) -> None:
        d, f = cfg.d_model, cfg.ffn_dim
        shapes = {"self_attn.o": (d, d), "ffn.up": (f, d), "ffn.down": (d, f), "norm_self": (d,), "norm_ffn": (d,),
                  "cross_attn.q": (d, d), "cross_attn.o": (d, d), "norm_cross": (d,)}
        for side, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
            for i in range(n_layers):
                z, h = f"{side}_stack.layers.{i}", f"{side}.layers.{i}"
                qkv = [_pair(src, f"{h}.self_attn.{p}_proj", (d, d)) for p in "qkv"]
                out[f"{z}.self_attn.qkv.weight"] = torch.cat([w for w, _ in qkv])  # rows [q | k | v]
                out[f"{z}.self_attn.qkv.bias"] = torch.cat([b for _, b in qkv])
                mapping = {**_LAYER, **(_CROSS if side == "decoder" else {})}
                for zoo_name, hf_name in mapping.items():
                    out[f"{z}.{zoo_name}.weight"], out[f"{z}.{zoo_name}.bias"] = _pair(src, f"{h}.{hf_name}", shapes[zoo_name])
                if side == "decoder":
                    kv = [_pair(src, f"{h}.encoder_attn.{p}_proj", (d, d)) for p in "kv"]
                    out[f"{z}.cross_attn.kv.weight"] = torch.cat([w for w, _ in kv])  # rows [k | v]
                    out[f"{z}.cross_attn.kv.bias"] = torch.cat([b for _, b in kv])

    def layers_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str,
                     out: dict[str, torch.Tensor]) -> None:
        for side, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
            for i in range(n_layers):
                z, h = f"{side}_stack.layers.{i}", f"{prefix}{side}.layers.{i}"
                mapping = {**_LAYER, **(_CROSS if side == "decoder" else {})}
                for part in ("weight", "bias"):
                    for p, chunk in zip("qkv", state[f"{z}.self_attn.qkv.{part}"].chunk(3), strict=True):
                        out[f"{h}.self_attn.{p}_proj.{part}"] = chunk
                    if side == "decoder":
                        for p, chunk in zip("kv", state[f"{z}.cross_attn.kv.{part}"].chunk(2), strict=True):
                            out[f"{h}.encoder_attn.{p}_proj.{part}"] = chunk
                    for zoo_name, hf_name in mapping.items():
                        out[f"{h}.{hf_name}.{part}"] = state[f"{z}.{zoo_name}.{part}"]

    def shared_tokens(self, src: HFTensors, v: int, d: int) -> torch.Tensor:
        """The one token table of a shared-embedding model. The forward pass reads `encoder.embed_tokens` and
        `decoder.embed_tokens` (copies of `shared` when tied); transformers 5 unties them from `shared` when
        tie_word_embeddings=false, and then they must still be equal for zoo to hold one table."""
        shared = src.take("shared.weight", (v, d))
        enc, dec = (src.take_optional(f"{side}.embed_tokens.weight", (v, d)) for side in ("encoder", "decoder"))
        enc, dec = shared if enc is None else enc, shared if dec is None else dec
        if not torch.equal(enc, dec):
            raise ValueError(
                f"{src.source}: encoder.embed_tokens and decoder.embed_tokens hold different weights (untied "
                f"embeddings, e.g. tie_word_embeddings=false), but {self.model_type} in zoo shares one token table "
                f"(share_embeddings=true); untied encoder/decoder token tables are not supported."
            )
        return enc


@FAMILIES.register("bart")
class Bart(Seq2SeqFamily):
    model_type = "bart"
    architecture = "BartForConditionalGeneration"
    class_prefix = "Bart"
    not_loaded = {f"Bart{suffix}": why for suffix, why in SEQ2SEQ_NOT_LOADED.items()}

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        return self.base_config(hf, positional="learned", pos_offset=2, embed_norm=True, share_embeddings=True)

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return self.base_hf_config(cfg, {
            "positional": (cfg.positional, "learned"), "pos_offset": (cfg.pos_offset, 2),
            "embed_norm": (cfg.embed_norm, True), "share_embeddings": (cfg.share_embeddings, True),
        })

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        v, d = cfg.vocab_size, cfg.d_model
        tokens = self.shared_tokens(src, v, d)
        out = {"src_embed.tokens.weight": tokens, "tgt_embed.tokens.weight": tokens}
        for side, zoo_side in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
            out[f"{zoo_side}.positional.table.weight"] = src.take(
                f"{side}.embed_positions.weight", (cfg.max_seq_len + 2, d)
            )
            out[f"{zoo_side}.norm.weight"], out[f"{zoo_side}.norm.bias"] = _pair(src, f"{side}.layernorm_embedding", (d,))
        self.layers_from_hf(src, cfg, out)
        return out

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}shared.weight": state["src_embed.tokens.weight"]}
        for side, zoo_side in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
            out[f"{prefix}{side}.embed_positions.weight"] = state[f"{zoo_side}.positional.table.weight"]
            out[f"{prefix}{side}.layernorm_embedding.weight"] = state[f"{zoo_side}.norm.weight"]
            out[f"{prefix}{side}.layernorm_embedding.bias"] = state[f"{zoo_side}.norm.bias"]
        self.layers_to_hf(state, cfg, prefix, out)
        return out
