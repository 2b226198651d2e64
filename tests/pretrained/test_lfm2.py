"""LFM2 import/export parity against transformers' Lfm2 built from small configs, every weight perturbed:
conv layers (zoo's model.linear_mixer=short_conv) and attention layers placed by `layer_types` or the older
`full_attn_idxs`, the MLP width transformers derives, tied and untied heads, 3 and 4 conv taps, conv biases;
logits within 1e-4 on right- and left-padded batches, greedy tokens equal to transformers' generate, the
export read back by transformers with equal logits, the bare Lfm2Model; what zoo cannot express is one
error."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import Lfm2Config, Lfm2ForCausalLM, Lfm2Model

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, right_padded, saved
from zoo.modules.attention import Attention
from zoo.modules.short_conv import ShortConv

BASE = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=72, block_multiple_of=16, vocab_size=99, max_position_embeddings=64,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
VARIANTS = {  # id -> config settings, which layers are attention
    "layer_types": (dict(layer_types=["conv", "full_attention", "conv", "full_attention"]),
                    [False, True, False, True]),
    # the Hub's LFM2 configs: full_attn_idxs, block_ff_dim for intermediate_size, tie_embedding; untied here
    "full_attn_idxs": (dict(full_attn_idxs=[2], block_ff_dim=96, tie_embedding=False, conv_L_cache=4,
                            block_ffn_dim_multiplier=1.5, rope_parameters={"rope_type": "default",
                                                                           "rope_theta": 500.0}),
                       [False, False, True, False]),
    # transformers zeroes a pad's input, and in_proj's bias then carries it into the window: right pads only
    "conv_bias": (dict(layer_types=["conv", "conv", "full_attention", "conv"], conv_bias=True),
                  [False, False, True, False]),
}


def tiny(variant: str, scale: float = 0.05, model_class=Lfm2ForCausalLM):
    settings, _ = VARIANTS[variant]
    return perturbed(model_class(Lfm2Config(**{**BASE, **settings})), scale=scale)


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_on_padded_batches(tmp_path, variant):
    hf = tiny(variant)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    attention = VARIANTS[variant][1]
    assert [type(layer.self_attn) for layer in model.decoder_stack.layers] == [
        Attention if a else ShortConv for a in attention]
    assert model.config.ffn_dim == hf.model.layers[0].feed_forward.w1.out_features
    right_padded_logits_match(hf, model)
    if variant != "conv_bias":
        left_padded_logits_match(hf, model)


def test_the_hub_config_keys_are_read_as_transformers_reads_them(tmp_path):
    """block_ff_dim 96 -> 2/3 -> 64 -> x1.5 -> 96, a multiple of 16; tie_embedding false; layer 2 attends."""
    model = zoo.from_pretrained(saved(tiny("full_attn_idxs"), tmp_path))
    cfg = model.config
    assert (cfg.ffn_dim, cfg.tie_embeddings, cfg.linear_mixer.conv_L_cache, cfg.positional.base) == (
        96, False, 4, 500.0)
    assert [cfg.layer_is_linear(i) for i in range(4)] == [True, True, False, True]


@pytest.mark.parametrize("variant", ["layer_types", "full_attn_idxs"])
def test_greedy_matches_transformers_generate(tmp_path, variant):
    hf = tiny(variant, scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_export_round_trip(tmp_path, variant):
    model = zoo.from_pretrained(saved(tiny(variant), tmp_path))
    out = export_round_trips(model, Lfm2ForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["full_attn_idxs"] == [i for i, a in enumerate(VARIANTS[variant][1]) if a]
    assert written["intermediate_size"] == model.config.ffn_dim
    assert written["block_auto_adjust_ff_dim"] is False


def test_the_bare_model_loads_and_exports(tmp_path):
    hf = tiny("layer_types", model_class=Lfm2Model)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == "none"
    ids, mask = right_padded(2, 10, 99, [10, 6])
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        got = model(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (got[real] - ref[real]).abs().max() < 1e-4
    out = zoo.save_pretrained(model, tmp_path / "export")
    back = Lfm2Model.from_pretrained(out).eval()
    with torch.no_grad():
        again = back(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (again[real] - ref[real]).abs().max() < 1e-4


def test_what_zoo_cannot_express_is_one_error():
    family = zoo.pretrained.FAMILIES.get("lfm2")()
    hf = {"model_type": "lfm2", **BASE,
          "layer_types": ["conv", "sliding_attention", "conv", "full_attention"],
          "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 2.0}}
    with pytest.raises(ValueError) as err:
        family.config_from_hf(hf)
    message = str(err.value)
    assert "layer_types (one per layer of 4, each of conv, full_attention)" in message
    assert "rope_type='yarn'" in message


def test_a_model_lfm2_cannot_carry_is_refused_on_export_naming_the_key(tmp_path):
    """A short_conv hybrid whose attention has no q/k norm: LFM2's always has one."""
    model = zoo.build(dict(arch="decoder", vocab_size=99, d_model=32, n_layers=2, n_heads=4, d_ff=48,
                           norm="rmsnorm", positional="rope", activation="swiglu", bias=False,
                           linear_mixer="short_conv", layer_pattern=["linear", "full"]))
    message = "its config.json cannot express model.mixer.qk_norm=False"
    with pytest.raises(ValueError, match=re.escape(message)):
        zoo.save_pretrained(model, tmp_path / "out", model_type="lfm2")
