"""Hugging Face `transformers` models with the same shape as a zoo config, built locally from a config with
random weights (nothing is downloaded): what a user would pick instead of zoo.

- decoder (GPT family) -> `GPT2LMHeadModel`: same width, depth, heads, FFN size, activation, learned
  positions, pre-LN, tied head, dropout.
- encoder_decoder (transformer_tiny) -> `MarianMTModel`: post-LN, sinusoidal positions, embeddings scaled
  by sqrt(d_model), shared and tied embeddings, ReLU FFN; the closest HF match (BART differs: learned
  positions and an embedding LayerNorm)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from zoo.config import ModelConfig
from zoo.registry import Registry

_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}

HF_REFERENCES: Registry[Callable[[ModelConfig], torch.nn.Module]] = Registry("hf reference arch")


def _activation(cfg: ModelConfig) -> str:
    if cfg.activation not in _HF_ACTIVATION:
        raise ValueError(
            f"model.activation={cfg.activation!r} has no Hugging Face equivalent here; "
            f"allowed: {', '.join(sorted(_HF_ACTIVATION))}."
        )
    return _HF_ACTIVATION[cfg.activation]


@HF_REFERENCES.register("decoder")
def gpt2_like(cfg: ModelConfig) -> torch.nn.Module:
    """A GPT2LMHeadModel of the zoo decoder's shape (SDPA attention)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if (cfg.norm_placement != "pre" or cfg.positional.name != "learned"
            or cfg.n_kv_heads not in (None, cfg.n_heads)):
        raise ValueError("gpt2_like needs a pre-LN, learned-position, "
                         "multi-head zoo decoder (GPT-2's layout).")
    hf = GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.max_seq_len, n_embd=cfg.d_model, n_layer=cfg.n_layers,
        n_head=cfg.n_heads, n_inner=cfg.ffn_dim, activation_function=_activation(cfg),
        resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.attention_dropout,
        layer_norm_epsilon=cfg.norm_eps, tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=cfg.bos_id, eos_token_id=cfg.eos_id, pad_token_id=cfg.pad_id,
    )
    hf._attn_implementation = "sdpa"
    return GPT2LMHeadModel(hf)


@HF_REFERENCES.register("encoder_decoder")
def marian_like(cfg: ModelConfig) -> torch.nn.Module:
    """A MarianMTModel of the zoo encoder-decoder's shape (SDPA attention)."""
    from transformers import MarianConfig, MarianMTModel

    if cfg.norm_placement != "post" or cfg.positional.name != "sinusoidal":
        raise ValueError("marian_like needs a post-LN, sinusoidal-position "
                         "zoo encoder_decoder (Marian's layout).")
    hf = MarianConfig(
        vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_seq_len,
        d_model=cfg.d_model, encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.ffn_dim, decoder_ffn_dim=cfg.ffn_dim, activation_function=_activation(cfg),
        dropout=cfg.dropout, attention_dropout=cfg.attention_dropout, activation_dropout=0.0,
        scale_embedding=cfg.embed_scale, share_encoder_decoder_embeddings=cfg.share_embeddings,
        tie_word_embeddings=cfg.tie_embeddings, pad_token_id=cfg.pad_id, eos_token_id=cfg.eos_id,
        bos_token_id=cfg.bos_id, decoder_start_token_id=cfg.start_id, forced_eos_token_id=None,
    )
    hf._attn_implementation = "sdpa"
    return MarianMTModel(hf)


def hf_like(cfg: ModelConfig) -> torch.nn.Module:
    """The Hugging Face model of `cfg`'s shape; raises for an arch without a reference."""
    return HF_REFERENCES.get(cfg.arch)(cfg)


def parameter_count(model: torch.nn.Module) -> int:
    """Unique trainable parameters (tied tensors once), for the 'same shape' check in the tables."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
