"""MIXERS, the token-mixer registry (`model.mixer`'s name -> module class), apart from its entries so that
an entry may build another (latent attention's cross-attention is attention) without importing it. The
entries: zoo.modules.attention (`attention`), zoo.modules.mla (`mla`), zoo.modules.gated_deltanet
(`gated_deltanet`), zoo.modules.short_conv (`short_conv`); their keys: zoo.modules.mixer_settings.

An entry is an nn.Module class built as `cls(cfg)` for self-attention, with Attention's forward signature
(x, mask, *, memory, positions, cache, need_weights) -> (out, weights), a `cross_attention(cfg)` classmethod
that builds the decoder's attention over the encoder output, `attention_widths()` (the FLOP count's q.k and
v widths; a recurrence, attending to no T keys, has none) and, where its keys need the rest of the config, a
`check_config(cfg)` classmethod. A mixer that only reads left to right sets `causal_only = True` (the
architectures with a bidirectional stack refuse it), one that cannot keep packed documents apart
`packs_documents = False` (document_ids are refused)."""

from __future__ import annotations

from typing import Any

from zoo.registry import Registry

MIXERS: Registry = Registry("token mixer", key="model.mixer")  # name -> module class


def mixers_of(cfg) -> list[tuple[str, str, Any]]:
    """(config key, name, module class) of each mixer some layer of `cfg` runs: model.mixer and, in a
    hybrid, model.linear_mixer; what one of them cannot do (a bidirectional stack, packed documents, a
    tensor-parallel split) the model cannot."""
    return [(key, settings.name, MIXERS.get(settings.name)) for key, settings in cfg.mixers_in_use()]


def refusal_of(cfg, attribute: str) -> tuple[str, str, str] | None:
    """(config key, name, reason) of the first mixer of `cfg` whose class gives a reason under `attribute`
    (e.g. tensor_parallel_refusal), or None."""
    return next(((key, name, getattr(cls, attribute)) for key, name, cls in mixers_of(cfg)
                 if getattr(cls, attribute, None) is not None), None)
