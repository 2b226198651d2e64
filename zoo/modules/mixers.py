"""MIXERS, the token-mixer registry (`model.mixer`'s name -> module class), apart from its entries so that
an entry may build another (latent attention's cross-attention is attention) without importing it. The
entries: zoo.modules.attention (`attention`), zoo.modules.mla (`mla`); their keys: zoo.modules.mixer_settings.

An entry is an nn.Module class built as `cls(cfg)` for self-attention, with Attention's forward signature
(x, mask, *, memory, positions, cache, need_weights) -> (out, weights), a `cross_attention(cfg)` classmethod
that builds the decoder's attention over the encoder output, `attention_widths()` (the FLOP count's q.k and
v widths) and, where its keys need the rest of the config, a `check_config(cfg)` classmethod."""

from __future__ import annotations

from zoo.registry import Registry

MIXERS: Registry = Registry("token mixer", key="model.mixer")  # name -> module class
