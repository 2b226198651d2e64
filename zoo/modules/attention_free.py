"""The spine checks of a stack whose every layer runs a mixer without attention (gated_deltanet, short_conv):
attention's keys (n_kv_heads, head_dim) and a positional scheme that acts inside attention (rotating q/k,
biasing scores) would mean nothing there, so each is one ValueError naming the key. In a hybrid
(model.linear_mixer set) the spine is the attention layers' and these checks do not apply."""

from __future__ import annotations

from zoo.modules.mixer_settings import no_positions
from zoo.modules.position_terms import POSITIONALS, Positional


def check_attention_free_spine(cfg, mixer: str, heads: str, order: str) -> None:
    """`heads`: how `mixer` sizes itself instead of attention's heads; `order`: what carries token order."""
    if cfg.linear_mixer is not None:
        return
    for key in ("n_kv_heads", "head_dim"):
        if getattr(cfg, key) is not None:
            raise ValueError(f"model.{key}={getattr(cfg, key)} is attention's; model.mixer={mixer} {heads}: "
                             f"drop model.{key} (null).")
    if POSITIONALS.get(cfg.positional.name).terms is not Positional.terms:
        raise ValueError(no_positions(mixer, order, cfg.positional.name))
