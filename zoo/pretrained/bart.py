"""BART and Marian (OPUS-MT): encoder-decoder, post-LN, fairseq-style layers, learned positions offset by 2
and a LayerNorm after both embeddings (BART) or fixed sinusoidal positions in the sin-half/cos-half layout, no
table stored, no embedding LayerNorm (Marian), optional sqrt(d_model) embedding scale, one shared token table
(Marian: or one per side), `final_logits_bias` as the head bias. Heads: the bare model (the decoder's hidden
states and the encoder's, names without `model.`) and the LM (BartForConditionalGeneration, MarianMTModel).
The sequence classification and QA classes read the decoder's output at the last `eos`, which zoo's
encoder_decoder heads (lm, none) do not express; they are named in the error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN, Key
from zoo.pretrained.decoder_heads import BARE, CausalLMLayout
from zoo.pretrained.family import Checks, Family
from zoo.pretrained.opt import FAIRSEQ_LAYER
from zoo.pretrained.tensor_map import HFTensors, Rows, stored_name, within


@dataclass(frozen=True)
class BiasedLMLayout(CausalLMLayout):
    """The LM head of BART and Marian: `lm_head` (tied to the target token table unless config.json unties it)
    plus `final_logits_bias` (1, V) as its bias; a zoo model without head bias exports an all-zero one."""

    bias: str = "~final_logits_bias"
    tokens: str = "tgt_embed.tokens.weight"

    def config(self, hf: Mapping[str, Any], family: Any) -> dict[str, Any]:
        return self.head_keys({"bias": True})

    def origins(self) -> dict[str, str]:
        return {**super().origins(), "head.proj.bias": self.bias}

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor],
                shapes: Mapping[str, tuple[int, ...]]) -> None:
        out["head.proj.bias"] = src.take(self.bias, (1, cfg.vocab_size))[0]
        super().from_hf(src, cfg, out, shapes)

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str
              ) -> dict[str, torch.Tensor]:
        bias = state.get("head.proj.bias")
        bias = (bias if bias is not None else torch.zeros(cfg.vocab_size))[None]
        return {stored_name(self.bias, prefix): bias, **super().to_hf(state, cfg, prefix)}


NOT_LOADED = {  # class-name suffix -> why zoo does not load it
    "ForSequenceClassification": "it classifies the decoder's output at the last eos token, and zoo's "
                                 "encoder_decoder carries model.head=lm | none",
    "ForQuestionAnswering": "it reads start/end logits from the decoder's output, and zoo's encoder_decoder "
                            "carries model.head=lm | none",
    "ForCausalLM": "the decoder alone (with cross-attention layers) is not a zoo model",
}
LAYERS = within("{s}_stack.layers.{i}.", "{s}.layers.{i}.", {
    **FAIRSEQ_LAYER, "cross_attn.q.{p}": "encoder_attn.q_proj.{p}",
    "cross_attn.o.{p}": "encoder_attn.out_proj.{p}",
    "cross_attn.kv.{p}": ("encoder_attn.k_proj.{p}", "encoder_attn.v_proj.{p}"),
    "norm_cross.{p}": "encoder_attn_layer_norm.{p}"})
SHARED = {"src_embed.tokens.weight": "shared.weight", "tgt_embed.tokens.weight": "shared.weight"}


class Bart(Family):
    model_type = "bart"
    class_prefix = "Bart"
    lm_suffixes = ("ForConditionalGeneration",)
    prefixes = ("model.",)
    heads = {"none": BARE, "lm": BiasedLMLayout("lm", proj="~lm_head")}
    not_loaded = {f"Bart{suffix}": why for suffix, why in NOT_LOADED.items()}
    same_model = frozenset({"head.bias"})  # no head bias is written as a zero final_logits_bias
    tensors = {**SHARED, "src_embed.positional.table.weight": "encoder.embed_positions.weight",
               "tgt_embed.positional.table.weight": "decoder.embed_positions.weight",
               "src_embed.norm.{p}": "encoder.layernorm_embedding.{p}",
               "tgt_embed.norm.{p}": "decoder.layernorm_embedding.{p}", **LAYERS}
    keys = (
        Key("vocab_size", "vocab_size"), Key("d_model", "d_model"), Key("n_layers", "encoder_layers"),
        Key("encoder_layers", "encoder_layers"), Key("decoder_layers", "decoder_layers"),
        Key("n_heads", "encoder_attention_heads"), Key("d_ff", "encoder_ffn_dim"),
        Key("activation", "activation_function", "gelu", PLAIN),
        Key("max_seq_len", "max_position_embeddings"),
        Key("dropout", "dropout", 0.1), Key("attn_dropout", "attention_dropout", 0.0),
        Key("embed_scale", "scale_embedding", False), Key("tie_embeddings", "tie_word_embeddings", True),
        Key("pad_id", "pad_token_id", 1, token=True), Key("bos_id", "bos_token_id", 0, token=True),
        Key("eos_id", "eos_token_id", 2, token=True),
        Key("decoder_start_id", "decoder_start_token_id", None, token=True),
    )
    fixed = {"arch": "encoder_decoder", "norm": "layernorm", "norm_eps": 1e-5, "norm_placement": "post",
             "final_norm": False, "bias": True, "positional": "learned",
             "positional.offset": 2, "embed_norm": True, "share_embeddings": True}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        return {}, {f"decoder_{k}": (hf.get(f"decoder_{k}"), hf.get(f"encoder_{k}"))
                    for k in ("attention_heads", "ffn_dim")}

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {"decoder_attention_heads": cfg.n_heads, "decoder_ffn_dim": cfg.ffn_dim,
                "activation_dropout": 0.0, "forced_eos_token_id": cfg.eos_id, "is_encoder_decoder": True}

    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """The one token table of a shared-embedding model. The forward pass reads `encoder.embed_tokens` and
        `decoder.embed_tokens` (copies of `shared` when tied); transformers 5 unties them from `shared` when
        tie_word_embeddings=false, and then they must still be equal for zoo to hold one table."""
        if not cfg.share_embeddings:
            return {}
        v, d = cfg.vocab_size, cfg.d_model
        shared = src.take("shared.weight", (v, d))
        enc, dec = (src.take_optional(f"{side}.embed_tokens.weight", (v, d))
                    for side in ("encoder", "decoder"))
        enc, dec = shared if enc is None else enc, shared if dec is None else dec
        if not torch.equal(enc, dec):
            raise ValueError(
                f"{src.source}: encoder.embed_tokens and decoder.embed_tokens hold different weights (untied "
                f"embeddings, e.g. tie_word_embeddings=false), but {self.model_type} in zoo shares one token "
                f"table (share_embeddings=true); untied encoder/decoder token tables are not supported."
            )
        return {"src_embed.tokens.weight": enc, "tgt_embed.tokens.weight": enc}

    def state_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """With an untied head (tie_word_embeddings=false) transformers 5 does not fill `encoder.embed_tokens`
        and `decoder.embed_tokens` from `shared` either, so the shared table is written under those names
        too."""
        out = super().state_to_hf(state, cfg)
        if cfg.share_embeddings and not cfg.tie_embeddings:
            prefix = self.base_prefix(cfg)
            for side in ("encoder", "decoder"):
                out[f"{prefix}{side}.embed_tokens.weight"] = out[f"{prefix}shared.weight"]
        return out


class Marian(Bart):
    model_type = "marian"
    class_prefix = "Marian"
    lm_suffixes = ("MTModel",)
    not_loaded = {"MarianForCausalLM": NOT_LOADED["ForCausalLM"]}
    keys = (*Bart.keys, Key("share_embeddings", "share_encoder_decoder_embeddings", True))
    fixed = {**{k: v for k, v in Bart.fixed.items() if not k.startswith("positional")},
             "positional": "sinusoidal", "positional.layout": "half", "embed_norm": False}

    def tensor_map(self, cfg: ModelConfig) -> Rows:
        tokens = SHARED if cfg.share_embeddings else {
            "src_embed.tokens.weight": "encoder.embed_tokens.weight",
            "tgt_embed.tokens.weight": "decoder.embed_tokens.weight"}
        return {**tokens, **LAYERS}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)
        vocab = settings["vocab_size"]
        return more, {**checks, "decoder_vocab_size": (hf.get("decoder_vocab_size") or vocab, vocab)}

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {**super().more_to_hf(cfg), "decoder_vocab_size": cfg.vocab_size}

    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """Older exports store the sinusoid tables (zoo computes them); unshared tables skip `shared`."""
        for name in ("encoder.embed_positions.weight", "decoder.embed_positions.weight", "shared.weight"):
            if name != "shared.weight" or not cfg.share_embeddings:
                src.discard(name)
        return super().read_first(src, cfg)
