"""save_pretrained refuses a model whose config.json would read back as a different model: any knob the
family does not know of is named instead of being dropped silently (the folder would load, in zoo and in
transformers, as another model)."""

import pytest

import zoo
from zoo.pretrained.roundtrip import check_roundtrip

TINY = dict(d_model=16, n_heads=2, n_layers=1, vocab_size=40, max_seq_len=16)
FAMILY = {"llama_small": "llama", "gpt2": "gpt2", "bert_small": "bert"}  # the family each preset exports as


@pytest.mark.parametrize(("preset", "knob", "value"), [
    ("llama_small", "qk_norm", True),
    ("llama_small", "attn_softcap", 5.0),
    ("llama_small", "attn_sinks", True),
    ("llama_small", "activation", "swiglu_clamped"),
    ("llama_small", "sliding_window", 4),
    ("gpt2", "final_softcap", 3.0),
    ("gpt2", "attn_scale", 1.0),
    ("gpt2", "head_dim", 4),
    ("bert_small", "qkv_bias", False),
])
def test_unexpressible_knob_is_named(tmp_path, preset, knob, value):
    model = zoo.build(preset, **TINY, **{knob: value})
    # another family may take it
    with pytest.raises(ValueError, match=rf"cannot express model.{knob}={value!r}"):
        zoo.save_pretrained(model, tmp_path / "hf", model_type=FAMILY[preset])
    assert not (tmp_path / "hf").exists()


def test_training_only_keys_and_resolved_defaults_are_not_differences():
    plain = zoo.build("gpt2", **TINY).config
    same = zoo.build("gpt2", **TINY, d_ff=64, dropout=0.3, init_std=0.1, n_kv_heads=2).config  # d_ff = 4 * 16
    check_roundtrip(plain, same, "gpt2")
