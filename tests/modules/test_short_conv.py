"""LFM2's gated short convolution (zoo.modules.short_conv) against transformers' Lfm2ShortConv (its
pure-PyTorch path) built from a tiny config: outputs and every gradient within 1e-5, with and without biases,
2 to 4 taps, a right-padded batch; a left-padded row equals the row alone even where biases would carry the
pads into the window; one token at a time through the cache equals the whole sequence; the config checks."""

import re

import pytest
import torch

import zoo
from zoo.config import ModelConfig
from zoo.modules.cache import LayerCache
from zoo.modules.mask import build_mask
from zoo.modules.short_conv import ShortConv

transformers = pytest.importorskip("transformers")
from transformers.models.lfm2 import modeling_lfm2 as hf  # noqa: E402

D_MODEL = 16


def _cfg(taps=3, bias=False):
    mixer = {"name": "short_conv", "conv_L_cache": taps, "conv_bias": bias}
    return ModelConfig(d_model=D_MODEL, n_heads=4, vocab_size=16, norm="rmsnorm", bias=False,
                       positional="none", mixer=mixer)


def _pair(taps=3, bias=False):
    config = hf.Lfm2Config(hidden_size=D_MODEL, conv_L_cache=taps, conv_bias=bias, num_hidden_layers=1,
                           layer_types=["conv"], vocab_size=16, num_attention_heads=4, num_key_value_heads=2)
    theirs = hf.Lfm2ShortConv(config, layer_idx=0)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    ours = ShortConv(_cfg(taps, bias))
    ours.load_state_dict({k: v.detach().clone() for k, v in theirs.state_dict().items()})  # the same names
    return theirs, ours


def _mask(key_mask, t):
    return build_mask(key_mask, causal=True, q_len=t, k_len=t)


@pytest.mark.parametrize("taps, bias", [(3, False), (3, True), (2, False), (4, True)])
def test_equals_transformers_lfm2_short_conv_outputs_and_gradients(taps, bias):
    torch.manual_seed(0)
    theirs, ours = _pair(taps, bias)
    b, t = 3, 9
    x = torch.randn(b, t, D_MODEL)
    key_mask = torch.ones(b, t, dtype=torch.long)
    key_mask[1, 6:] = 0  # right padding: real tokens never read a pad (the window looks back)
    key_mask[2, 2:] = 0
    x_theirs, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = theirs(x_theirs, attention_mask=key_mask)
    got, weights = ours(x_ours, _mask(key_mask, t))
    assert weights is None
    real = key_mask.bool()
    assert (got[real] - expected[real]).abs().max() <= 1e-5
    weight = torch.randn_like(got) * real[..., None]
    (expected * weight).sum().backward()
    (got * weight).sum().backward()
    assert (x_ours.grad - x_theirs.grad).abs().max() <= 1e-5
    for name, p in theirs.named_parameters():
        assert (ours.get_parameter(name).grad - p.grad).abs().max() <= 1e-5, name


def test_left_padded_rows_equal_transformers_without_biases():
    """LFM2 has no conv biases: a pad's in_proj output is zero in both, so left pads agree too."""
    torch.manual_seed(1)
    theirs, ours = _pair(3, False)
    t = 8
    x = torch.randn(2, t, D_MODEL)
    key_mask = torch.ones(2, t, dtype=torch.long)
    key_mask[0, :3] = 0
    real = key_mask.bool()
    got = ours(x, _mask(key_mask, t))[0]
    expected = theirs(x, attention_mask=key_mask)
    assert (got[real] - expected[real]).abs().max() <= 1e-5


@pytest.mark.parametrize("bias", [False, True])
def test_a_left_padded_row_equals_the_row_alone(bias):
    """Pads must not enter the window: they carry large inputs, and with biases in_proj(pad) is not zero (the
    gated input b*h is zeroed at pads, not only x)."""
    torch.manual_seed(2)
    ours = ShortConv(_cfg(4, bias))
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    t, pads = 9, 4
    alone = torch.randn(1, t - pads, D_MODEL)
    padded = torch.cat([torch.randn(1, pads, D_MODEL) * 10, alone], dim=1)
    key_mask = torch.ones(1, t, dtype=torch.long)
    key_mask[0, :pads] = 0
    batch = ours(padded, _mask(key_mask, t))[0]
    expected = ours(alone, _mask(None, t - pads))[0]
    assert (batch[0, pads:] - expected[0]).abs().max() < 1e-5


def test_one_token_at_a_time_through_the_cache_equals_the_whole_sequence():
    torch.manual_seed(3)
    ours = ShortConv(_cfg(3, True))
    x = torch.randn(2, 7, D_MODEL)
    whole = ours(x, _mask(None, 7))[0]
    cache = LayerCache()
    first = ours(x[:, :3], _mask(None, 3), cache=cache)[0]  # a prefill, then steps
    steps = [first] + [ours(x[:, i : i + 1], _mask(None, 1), cache=cache)[0] for i in range(3, 7)]
    assert (torch.cat(steps, 1) - whole).abs().max() < 1e-6
    assert cache.state["conv"].shape == (2, 2, D_MODEL) and cache.length == 7  # L - 1 inputs, any length


@pytest.mark.parametrize("keys, message", [
    ({"positional": "rope"}, "model.positional=rope acts inside attention (rotating q/k or biasing scores), "
                             "which model.mixer=short_conv does not have"),
    ({"n_kv_heads": 2}, "model.n_kv_heads=2 is attention's; model.mixer=short_conv has no heads"),
    ({"mixer": {"name": "short_conv", "conv_L_cache": 0}}, "model.mixer.conv_L_cache"),
    ({"arch": "encoder"}, "model.mixer=short_conv reads the tokens left to right only"),
])
def test_bad_configs_are_one_error_naming_the_key(keys, message):
    base = dict(arch="decoder", vocab_size=32, d_model=16, n_layers=1, n_heads=2, positional="none",
                mixer="short_conv")
    with pytest.raises(ValueError, match=re.escape(message)):
        zoo.build({**base, **keys})
