"""RoPE frequency scalings (zoo/modules/rope_scaling.py) against transformers' ROPE_INIT_FUNCTIONS, built
from a LlamaConfig with the matching `rope_parameters` (no download), and their config checks."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import zoo
from zoo.config import ModelConfig
from zoo.modules.positional import Rotary
from zoo.modules.positional_settings import ROPE_SCALING
from zoo.modules.rope_scaling import ROPE_SCALINGS

HEAD, HEADS, THETA, ORIGINAL = 32, 2, 10000.0, 64

# zoo's model.positional.scaling keys -> transformers rope_parameters, per scaling
CASES = {
    "linear": (dict(factor=4.0), dict(factor=4.0)),
    "llama3": (dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_len=ORIGINAL),
               dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=ORIGINAL)),
    "yarn": (dict(factor=4.0, original_max_len=ORIGINAL),
             dict(factor=4.0, original_max_position_embeddings=ORIGINAL)),
}


def rope_part(scaling: str = "none", **keys) -> dict:
    """model.positional for RoPE: its `keys`, and `scaling` by name with that scaling's `scaling_keys`."""
    scaling_keys = keys.pop("scaling_keys", {})
    return {"name": "rope", **keys, "scaling": {"name": scaling, **scaling_keys}}


def zoo_rotary(scaling: str, fraction: float, **keys) -> Rotary:
    cfg = ModelConfig(d_model=HEAD * HEADS, n_heads=HEADS, max_seq_len=4 * ORIGINAL,
                      positional=rope_part(scaling, base=THETA, fraction=fraction, scaling_keys=keys))
    zoo.models.check_config(cfg)
    return Rotary(cfg)


def hf_frequencies(rope_type: str, fraction: float, **params) -> tuple[torch.Tensor, float]:
    hf = LlamaConfig(hidden_size=HEAD * HEADS, num_attention_heads=HEADS,
                     max_position_embeddings=4 * ORIGINAL,
                     rope_parameters=dict(rope_type=rope_type, rope_theta=THETA,
                                          partial_rotary_factor=fraction, **params))
    return ROPE_INIT_FUNCTIONS[rope_type](hf, "cpu")


@pytest.mark.parametrize("fraction", [1.0, 0.5])
@pytest.mark.parametrize("scaling", sorted(CASES))
def test_inverse_frequencies_match_transformers(scaling, fraction):
    zoo_keys, hf_params = CASES[scaling]
    rope = zoo_rotary(scaling, fraction, **zoo_keys)
    expected, attention_factor = hf_frequencies(scaling, fraction, **hf_params)
    got = rope.inv_freq()
    assert got.shape == expected.shape == (int(HEAD * fraction) // 2,)
    assert torch.allclose(got, expected, rtol=1e-6, atol=0)
    assert rope.scaling.attention_factor == pytest.approx(attention_factor, rel=1e-12)


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_truncate_matches_transformers(truncate):
    """positional.scaling.truncate (gpt-oss: false) keeps YaRN's ramp ends where they fall instead of
    rounding them out to whole pairs; at these shapes the two differ, so the case is not vacuous."""
    keys, params = CASES["yarn"]
    got = zoo_rotary("yarn", 1.0, **keys, truncate=truncate).inv_freq()
    expected, _ = hf_frequencies("yarn", 1.0, **params, truncate=truncate)
    assert torch.allclose(got, expected, rtol=1e-6, atol=0)
    other = zoo_rotary("yarn", 1.0, **keys, truncate=not truncate).inv_freq()
    assert not torch.allclose(got, other, rtol=1e-4, atol=0)


def test_scalings_change_what_they_should():
    """The cases above are not vacuous: llama3 keeps short wavelengths, divides long ones by the factor and
    blends at least one in between; linear divides all; yarn sharpens attention (factor > 1)."""
    plain = zoo_rotary("none", 1.0).inv_freq()
    llama3 = zoo_rotary("llama3", 1.0, **CASES["llama3"][0]).inv_freq()
    ratio = plain / llama3
    kept, divided = torch.isclose(ratio, torch.tensor(1.0)), torch.isclose(ratio, torch.tensor(8.0))
    assert kept.any() and divided.any() and (~kept & ~divided).any()
    wavelen = 2 * math.pi / plain
    assert torch.equal(kept, wavelen < ORIGINAL / 4) and torch.equal(divided, wavelen > ORIGINAL / 1)
    assert torch.allclose(zoo_rotary("linear", 1.0, factor=4.0).inv_freq(), plain / 4)
    assert zoo_rotary("yarn", 1.0,
                      **CASES["yarn"][0]).scaling.attention_factor == pytest.approx(0.1 * math.log(4) + 1)


def test_yarn_attention_factor_scales_cos_and_sin():
    rope = zoo_rotary("yarn", 1.0, **CASES["yarn"][0])
    terms = rope.terms(torch.arange(6)[None], 0, 6, causal=False)
    angles = torch.arange(6.0)[:, None] * rope.inv_freq()
    factor = 0.1 * math.log(4) + 1
    assert (torch.allclose(terms.cos[0, 0], angles.cos() * factor)
            and torch.allclose(terms.sin[0, 0], angles.sin() * factor))


@pytest.mark.parametrize(("positional", "message"), [
    (rope_part("linear", scaling_keys=dict(factor=0.5)), r"model.positional.scaling.factor .* must be >= 1"),
    (rope_part("llama3", scaling_keys=dict(factor=8.0)), r"needs model.positional.scaling.original_max_len"),
    (rope_part("llama3", scaling_keys=dict(factor=8.0, original_max_len=64, high_freq_factor=1.0)),
     r"model.positional.scaling.high_freq_factor=1.0 must be > model.positional.scaling.low_freq_factor=1.0"),
    (rope_part(fraction=0.1), r"= int\(16 \* 0.1\) = 1 features per head; that must be even and >= 2"),
])
def test_rope_keys_are_checked_when_the_model_is_built(positional, message):
    cfg = ModelConfig(d_model=32, n_heads=2, positional=positional)
    with pytest.raises(ValueError, match=message):
        zoo.models.check_config(cfg)


@pytest.mark.parametrize(("positional", "message"), [
    (rope_part("ntk"),
     r"model.positional.scaling.name: Unknown positional.scaling 'ntk'.*"
     r"Allowed: linear, llama3, longrope, none, yarn"),
    (rope_part("none", scaling_keys=dict(factor=8.0)),
     r"model.positional.scaling=none has no key 'factor'. model.positional.scaling.factor is read by "
     r"positional.scaling=linear\|llama3\|yarn: choose it with model.positional.scaling=linear"),
    (rope_part("linear", scaling_keys=dict(original_max_len=64)),
     r"model.positional.scaling=linear has no key 'original_max_len'. .* is read by "
     r"positional.scaling=llama3\|longrope\|yarn"),
    (rope_part(fraction=1.5), r"model.positional.fraction must be a finite number in \(0, 1\], got 1.5"),
    (rope_part(fraction=0.0), r"model.positional.fraction must be a finite number in \(0, 1\], got 0.0"),
    (rope_part("linear", scaling_keys=dict(factor="8")),
     r"model.positional.scaling.factor must be a finite number > 0, got '8'"),
    (rope_part("llama3", scaling_keys=dict(low_freq_factor=float("nan"))),
     r"model.positional.scaling.low_freq_factor must be a finite number > 0"),
    (rope_part("yarn", scaling_keys=dict(original_max_len=0)),
     r"model.positional.scaling.original_max_len must be null or an integer >= 1, got 0"),
    (rope_part("yarn", scaling_keys=dict(original_max_len=True)),
     r"model.positional.scaling.original_max_len must be null or an integer >= 1, got True"),
    ({"name": "rope", "scaling": 8},
     r"model.positional.scaling must be a name \(linear, llama3, longrope, none, yarn\) or a mapping with "
     r"`name`.*got 8"),
])
def test_rope_key_types_are_checked_by_the_config(positional, message):
    """Each key is checked by the settings of the entry that reads it, when the config is made; a key of
    another entry is refused naming the entries that read it."""
    with pytest.raises(ValueError, match=message):
        zoo.models.check_config(ModelConfig(positional=positional))


def test_registry_lists_every_entry_with_its_keys():
    assert ROPE_SCALINGS.names() == ROPE_SCALING.names() == ["linear", "llama3", "longrope", "none", "yarn"]
    keys = ROPE_SCALING.docs()
    assert all(set(keys[n]) <= {"factor", "low_freq_factor", "high_freq_factor", "original_max_len",
                                "short_factor", "long_factor", "truncate", "mscale", "mscale_all_dim"}
               for n in ROPE_SCALINGS.names())


def test_scaling_on_a_scheme_that_does_not_rotate_is_refused():
    import zoo

    with pytest.raises(ValueError, match=r"model.positional=learned has no key 'scaling'. "
                                         r"model.positional.scaling is read by positional=rope"):
        zoo.build("gpt_nano", positional={"scaling": {"name": "linear", "factor": 2.0}})
    with pytest.raises(ValueError, match=r"model.positional=alibi has no key 'scaling'. "
                                         r"model.positional.scaling is read by positional=rope"):
        zoo.build("gpt_nano", positional={"name": "alibi", "scaling": "llama4"})
    with pytest.raises(ValueError, match="model.positional.scaling: Unknown positional.scaling 'llama4'. "
                                         "Did you mean 'llama3'"):
        zoo.build("gpt_nano", positional={"name": "rope", "scaling": "llama4"})


# ----- LongRoPE: per-pair factors, short within the original length, long beyond -----
def longrope_keys(pairs: int) -> dict:
    return dict(original_max_len=ORIGINAL, short_factor=[1.0 + i / 4 for i in range(pairs)],
                long_factor=[2.0 + i for i in range(pairs)])


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_longrope_matches_transformers_in_both_regimes(fraction):
    """transformers computes the short set with no length and the long one for original + 1 positions."""
    keys = longrope_keys(int(HEAD * fraction) // 2)
    rope = zoo_rotary("longrope", fraction, **keys)
    params = dict(short_factor=keys["short_factor"], long_factor=keys["long_factor"],
                  original_max_position_embeddings=ORIGINAL)
    hf = LlamaConfig(hidden_size=HEAD * HEADS, num_attention_heads=HEADS,
                     max_position_embeddings=4 * ORIGINAL,
                     rope_parameters=dict(rope_type="longrope", rope_theta=THETA,
                                          partial_rotary_factor=fraction, **params))
    short, attention_factor = ROPE_INIT_FUNCTIONS["longrope"](hf, "cpu")
    long, _ = ROPE_INIT_FUNCTIONS["longrope"](hf, "cpu", seq_len=ORIGINAL + 1)
    within, beyond = torch.arange(ORIGINAL)[None], torch.arange(ORIGINAL + 1)[None]
    assert torch.allclose(rope.inv_freq(position_ids=within), short, rtol=1e-6, atol=0)
    assert torch.allclose(rope.inv_freq(position_ids=beyond), long, rtol=1e-6, atol=0)
    assert torch.allclose(rope.inv_freq(), short, rtol=1e-6, atol=0)
    assert rope.scaling.attention_factor == pytest.approx(attention_factor, rel=1e-12)


def test_longrope_closed_form():
    """Worked by hand: R = 4 rotated features at base 100 turn by 1 and 1/10 per position; short factors
    (1, 2) give (1, 0.05), long (4, 5) give (0.25, 0.02); max_seq_len 256 over original 16 is s = 16, so
    cos and sin are multiplied by sqrt(1 + ln 16 / ln 16) = sqrt(2). 16 positions are short, 17 long."""
    cfg = ModelConfig(d_model=8, n_heads=2, max_seq_len=256,
                      positional=rope_part("longrope", base=100.0, scaling_keys=dict(
                          original_max_len=16, short_factor=[1.0, 2.0], long_factor=[4.0, 5.0])))
    zoo.models.check_config(cfg)
    rope = Rotary(cfg)
    for length, freq in ((16, [1.0, 0.05]), (17, [0.25, 0.02])):
        terms = rope.terms(torch.arange(length)[None], 0, length, causal=False)
        angles = torch.arange(length, dtype=torch.float64)[:, None] * torch.tensor(freq, dtype=torch.float64)
        assert torch.allclose(terms.cos[0, 0].double(), angles.cos() * math.sqrt(2), atol=1e-6)
        assert torch.allclose(terms.sin[0, 0].double(), angles.sin() * math.sqrt(2), atol=1e-6)
    unstretched = dataclasses.replace(cfg, max_seq_len=16)  # s = 1: no sharpening
    assert Rotary(unstretched).scaling.attention_factor == 1.0


@pytest.mark.parametrize(("keys", "message"), [
    (dict(short_factor=[1.0] * 8, long_factor=[2.0] * 8), r"needs model.positional.scaling.original_max_len"),
    (dict(original_max_len=64, long_factor=[2.0] * 8),
     r"needs model.positional.scaling.short_factor: one factor per rotated pair, 8 here .*got None"),
    (dict(original_max_len=64, short_factor=[1.0] * 8, long_factor=[2.0] * 7),
     r"needs model.positional.scaling.long_factor: one factor per rotated pair, 8 here"),
    (dict(original_max_len=64, short_factor=[1.0, 0.0] * 4, long_factor=[2.0] * 8),
     r"model.positional.scaling.short_factor must be null or a list, each a finite number > 0"),
])
def test_longrope_keys_are_checked(keys, message):
    with pytest.raises(ValueError, match=message):
        zoo.models.check_config(ModelConfig(d_model=32, n_heads=2,
                                            positional=rope_part("longrope", scaling_keys=keys)))


def test_longrope_factors_under_another_scaling_are_refused():
    with pytest.raises(ValueError, match=r"model.positional.scaling=linear has no key 'short_factor'. "
                                         r"model.positional.scaling.short_factor is read by "
                                         r"positional.scaling=longrope"):
        ModelConfig(d_model=32, n_heads=2,
                    positional=rope_part("linear", scaling_keys=dict(factor=2.0, short_factor=[1.0] * 8)))
