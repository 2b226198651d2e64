"""save_pretrained refuses a model whose config.json would read back as a different model: any knob the
family does not know of is named instead of being dropped silently (the folder would load, in zoo and in
transformers, as another model)."""

import dataclasses
import re

import pytest
import transformers

import zoo
from zoo.pretrained.api import family_for
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


_LFM2_MOE = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                 intermediate_size=24, moe_intermediate_size=8, num_experts=4, num_experts_per_tok=2,
                 num_dense_layers=1, vocab_size=40, layer_types=["conv", "full_attention"])
_DEEPSEEK_V3 = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                    intermediate_size=24, moe_intermediate_size=8, n_routed_experts=4, num_experts_per_tok=2,
                    n_group=2, topk_group=1, first_k_dense_replace=1, vocab_size=40, q_lora_rank=12,
                    kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6)


def _imported(model_type: str, tiny: dict, **router) -> tuple:
    """A tiny transformers config of `model_type` read by zoo, its router's settings changed by `router`."""

    config_class = {"lfm2_moe": "Lfm2MoeConfig", "deepseek_v3": "DeepseekV3Config"}[model_type]
    family = family_for(model_type)
    cfg = family.config_from_hf(getattr(transformers, config_class)(**tiny).to_dict())
    ffn = cfg.ffn.to_data()
    ffn["router"] = {**ffn["router"], **router}
    return family, dataclasses.replace(cfg, ffn=ffn)


@pytest.mark.parametrize(("model_type", "tiny", "router", "named"), [
    ("lfm2_moe", _LFM2_MOE, {"float32": True},  # LFM2-MoE routes in the model's dtype
     "model.ffn.router.float32=True (would load as False)"),
    ("lfm2_moe", _LFM2_MOE, {"renorm_eps": 1e-20}, "model.ffn.router.renorm_eps=1e-20 (would load as 1e-06)"),
    ("lfm2_moe", _LFM2_MOE, {"n_group": 2},  # lfm2_moe's config.json has no groups
     "model.ffn.router.n_group=2 (would load as 1)"),
    ("deepseek_v3", _DEEPSEEK_V3, {"float32": False},  # DeepSeek-V3 routes in float32
     "model.ffn.router.float32=False (would load as True)"),
    ("deepseek_v3", _DEEPSEEK_V3, {"renorm_eps": 1e-6},
     "model.ffn.router.renorm_eps=1e-06 (would load as 1e-20)"),
], ids=["lfm2_moe-float32", "lfm2_moe-renorm_eps", "lfm2_moe-n_group", "deepseek_v3-float32",
        "deepseek_v3-renorm_eps"])
def test_a_router_setting_the_family_cannot_say_is_named(model_type, tiny, router, named):
    """The round trip compares the router's whole settings, not its name alone: a setting the family says by
    its model_type (the dtype it routes in, the renormalisation's epsilon) or cannot say is named."""
    family, cfg = _imported(model_type, tiny, **router)
    with pytest.raises(ValueError, match=re.escape(
            f"cannot be exported as {model_type!r}: its config.json cannot express {named}")):
        zoo.pretrained.api.hf_config(family, cfg)


@pytest.mark.parametrize(("model_type", "tiny"), [("lfm2_moe", _LFM2_MOE), ("deepseek_v3", _DEEPSEEK_V3)],
                         ids=["lfm2_moe", "deepseek_v3"])
def test_an_imported_router_round_trips_and_its_bias_step_is_training_only(model_type, tiny):
    family, cfg = _imported(model_type, tiny)
    zoo.pretrained.api.hf_config(family, cfg)
    family, cfg = _imported(model_type, tiny, bias_rate=0.05)  # how the bias follows the load in training
    written = zoo.pretrained.api.hf_config(family, cfg)
    assert family.read_back(written, cfg).ffn.router == dataclasses.replace(cfg.ffn.router, bias_rate=0.001)
