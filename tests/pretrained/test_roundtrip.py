"""save_pretrained refuses a model whose config.json would read back as a different model: any knob the
family does not know of is named instead of being dropped silently (the folder would load, in zoo and in
transformers, as another model)."""

import pytest

import zoo
from zoo.pretrained.roundtrip import check_roundtrip

TINY = dict(d_model=16, n_heads=2, n_layers=1, vocab_size=40, max_seq_len=16)
FAMILY = {"llama_small": "llama", "gpt2": "gpt2", "bert_small": "bert"}  # the family each preset exports as


@pytest.mark.parametrize(("preset", "knob", "value"), [
    ("llama_small", "mixer.qk_norm", True),
    ("llama_small", "mixer.softcap", 5.0),
    ("llama_small", "mixer.sinks", True),
    ("llama_small", "activation", "swiglu_clamped"),
    ("llama_small", "mixer.sliding_window", 4),
    ("gpt2", "head.softcap", 3.0),
    ("gpt2", "mixer.scale", 1.0),
    ("gpt2", "head_dim", 4),
    ("bert_small", "mixer.qkv_bias", False),
])
def test_unexpressible_knob_is_named(tmp_path, preset, knob, value):
    part, _, key = knob.rpartition(".")  # "mixer.softcap" -> mixer={"softcap": 5.0}
    model = zoo.build(preset, **TINY, **({part: {key: value}} if part else {key: value}))
    # another family may take it
    with pytest.raises(ValueError, match=rf"cannot express model.{knob}={value!r}"):
        zoo.save_pretrained(model, tmp_path / "hf", model_type=FAMILY[preset])
    assert not (tmp_path / "hf").exists()


def test_training_only_keys_and_resolved_defaults_are_not_differences():
    plain = zoo.build("gpt2", **TINY).config
    same = zoo.build("gpt2", **TINY, d_ff=64, dropout=0.3, init_std=0.1, n_kv_heads=2).config  # d_ff = 4 * 16
    check_roundtrip(plain, same, "gpt2")


def test_layer_patterns_are_compared_by_what_each_layer_is():
    """Two spellings of one stack are the same model (a cycle longer than the stack, a tag that says the
    default); a pattern that changes a layer is named as written."""
    def cfg(pattern):
        return zoo.build("llama_small", **{**TINY, "n_layers": 2}, layer_pattern=pattern).config

    check_roundtrip(cfg(["rope", "rope", "rope", "nope"]), cfg([]), "llama")  # layer 3 is beyond the stack
    check_roundtrip(cfg(["rope"]), cfg([]), "llama")
    windowless = zoo.build("llama_small", **{**TINY, "n_layers": 2}, mixer={"sliding_window": 4},
                           layer_pattern=["global"]).config
    check_roundtrip(windowless, cfg([]), "llama")  # a window no layer uses is no window
    with pytest.raises(ValueError, match=r"model.layer_pattern=\['rope', 'nope'\] \(would load as \[\]\)"):
        check_roundtrip(cfg(["rope", "nope"]), cfg([]), "llama")
