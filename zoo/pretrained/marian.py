"""Marian (OPUS-MT): BART's layer layout with fixed sinusoidal positions in the sin-half/cos-half layout
(no table stored), no embedding LayerNorm, sqrt(d_model) embedding scale, swish activation. Heads: MarianModel
(bare) and MarianMTModel (the LM)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.bart import SEQ2SEQ_NOT_LOADED, Seq2SeqFamily
from zoo.pretrained.family import FAMILIES, HFTensors, require


@FAMILIES.register("marian")
class Marian(Seq2SeqFamily):
    model_type = "marian"
    architecture = "MarianMTModel"
    class_prefix = "Marian"
    lm_suffixes = ("MTModel",)
    not_loaded = {"MarianForCausalLM": SEQ2SEQ_NOT_LOADED["ForCausalLM"]}

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        require(hf, "marian", {"decoder_vocab_size": (hf.get("decoder_vocab_size") or hf["vocab_size"], hf["vocab_size"])})
        return self.base_config(
            hf, positional="sinusoidal", sinusoidal_layout="half", embed_norm=False,
            share_embeddings=hf.get("share_encoder_decoder_embeddings", True),
        )

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        checks = {
            "positional": (cfg.positional, "sinusoidal"), "sinusoidal_layout": (cfg.sinusoidal_layout, "half"),
            "embed_norm": (cfg.embed_norm, False),
        }
        return self.base_hf_config(
            cfg, checks, share_encoder_decoder_embeddings=cfg.share_embeddings, decoder_vocab_size=cfg.vocab_size
        )

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        v, d = cfg.vocab_size, cfg.d_model
        if cfg.share_embeddings:
            tokens = self.shared_tokens(src, v, d)
            out = {"src_embed.tokens.weight": tokens, "tgt_embed.tokens.weight": tokens}
        else:
            out = {"src_embed.tokens.weight": src.take("encoder.embed_tokens.weight", (v, d)),
                   "tgt_embed.tokens.weight": src.take("decoder.embed_tokens.weight", (v, d))}
            src.discard("shared.weight")
        for side in ("encoder", "decoder"):  # older exports store the fixed sinusoid table; zoo computes it
            src.discard(f"{side}.embed_positions.weight")
        self.layers_from_hf(src, cfg, out)
        return out

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        if cfg.share_embeddings:
            out = {f"{prefix}shared.weight": state["src_embed.tokens.weight"]}
        else:
            out = {f"{prefix}encoder.embed_tokens.weight": state["src_embed.tokens.weight"],
                   f"{prefix}decoder.embed_tokens.weight": state["tgt_embed.tokens.weight"]}
        self.layers_to_hf(state, cfg, prefix, out)
        return out
