"""Tiny versions of every preset, for fast CPU tests."""

import zoo
from zoo.modules.positional import POSITIONALS, Positional

SCHEMES = POSITIONALS.names()  # every registered positional scheme: a new one is tested without edits here
POSITIONED = [n for n in SCHEMES if POSITIONALS.get(n) is not Positional]  # all but "none"

TINY = dict(d_model=32, n_heads=4, vocab_size=97, max_seq_len=32, d_ff=None, ffn_ratio=2.0)


def tiny(name: str, **overrides):
    """Preset `name` shrunk to test size (its architecture and knobs kept)."""
    preset = zoo.presets.preset_dict(name)
    sizes = dict(TINY)
    if preset.get("n_heads") == 1:
        sizes["n_heads"] = 1
    if preset.get("n_kv_heads"):
        sizes["n_kv_heads"] = 2
    if preset.get("n_layers", 2) > 2:
        sizes["n_layers"] = 2
    if preset.get("encoder_layers"):
        sizes.update(encoder_layers=2, decoder_layers=1)
    return zoo.build(name, **{**sizes, **overrides})
