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
    pattern = preset.get("layer_pattern")
    if isinstance(pattern, dict) and sizes.get("n_layers"):  # the cycle after the prefix keeps a layer
        sizes["n_layers"] = max(2, len(pattern.get("prefix", [])) + 1)
    ffn = preset.get("ffn")
    if isinstance(ffn, dict) and ffn.get("expert_d_ff"):
        sizes["ffn"] = {"expert_d_ff": 16}
    mixer = preset.get("mixer")
    if isinstance(mixer, dict) and mixer.get("q_lora_rank"):  # mla: a query latent narrower than d_model
        sizes["mixer"] = {"q_lora_rank": 16}
    if preset.get("encoder_layers"):
        sizes.update(encoder_layers=2, decoder_layers=1)
    return zoo.build(name, **{**sizes, **overrides})
