"""Sliding-window attention: the band against transformers' own mask functions, the per-layer pattern
against Mistral / Gemma 2 / Gemma 3's layer rules, the receptive field it implies, and decoding with the
KV cache (fused and weights paths agree)."""

import pytest
import torch

import zoo
from zoo.config import ModelConfig
from zoo.modules.mask import build_mask

masking_utils = pytest.importorskip("transformers.masking_utils")


def _reference(q_len: int, k_len: int, window: int, causal: bool) -> torch.Tensor:
    """transformers' mask functions, evaluated for queries at the last q_len of k_len positions."""
    fn = (masking_utils.sliding_window_causal_mask_function(window) if causal
          else masking_utils.sliding_window_bidirectional_mask_function(window))
    offset = k_len - q_len
    zero = torch.tensor(0)
    return torch.tensor([[bool(fn(zero, zero, torch.tensor(offset + i), torch.tensor(j)))
                          for j in range(k_len)]
                         for i in range(q_len)])


@pytest.mark.parametrize(("q_len", "k_len", "window", "causal"), [
    (9, 9, 3, True), (9, 9, 1, True), (1, 12, 4, True), (3, 10, 5, True),
    (6, 6, 20, True),  # with a cache too
    (9, 9, 3, False), (9, 9, 1, False), (6, 6, 20, False),  # a bidirectional stack has no cache
])
def test_band_matches_transformers(q_len, k_len, window, causal):
    mask = build_mask(None, causal=causal, q_len=q_len, k_len=k_len, window=window).local
    visible = torch.isfinite(mask.apply(torch.zeros(1, 1, q_len, k_len)))[0, 0]
    assert torch.equal(visible, _reference(q_len, k_len, window, causal))


@pytest.mark.parametrize(("pattern", "expected"), [
    ([], [True] * 6),  # Mistral v0.1: every layer local
    (["local", "global"], [True, False] * 3),  # Gemma 2: layer_types alternate sliding / full
    (["local", "local", "global"], [True, True, False] * 2),  # every k-th layer global (Gemma 3 uses k = 6)
])
def test_layer_pattern(pattern, expected):
    cfg = ModelConfig(mixer={"sliding_window": 4}, layer_pattern=pattern, n_layers=6)
    assert [cfg.layer_is_local(i) for i in range(6)] == expected
    assert not any(ModelConfig(n_layers=6).layer_is_local(i) for i in range(6))  # no window: all global


@pytest.mark.parametrize(("n_layers", "window"), [(1, 3), (2, 3)])
def test_receptive_field_is_layers_times_window(n_layers, window):
    """Position t sees tokens back to t - n_layers * (window - 1), and none before."""
    torch.manual_seed(0)
    model = zoo.build(dict(arch="decoder", vocab_size=30, d_model=16, n_heads=2, n_layers=n_layers,
                           positional="rope", mixer={"sliding_window": window})).eval()
    ids = torch.randint(0, 30, (1, 12))
    reach = n_layers * (window - 1)
    t = 11
    far, near = ids.clone(), ids.clone()
    far[0, t - reach - 1] = (ids[0, t - reach - 1] + 1) % 30
    near[0, t - reach] = (ids[0, t - reach] + 1) % 30
    with torch.no_grad():
        base = model(ids).logits[0, t]
        assert torch.equal(model(far).logits[0, t], base)
        assert not torch.allclose(model(near).logits[0, t], base)


@pytest.mark.parametrize("pattern", [[], ["local", "global"]], ids=["all_local", "alternating"])
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_cache_and_weights_path_agree(arch, pattern):
    torch.manual_seed(0)
    model = zoo.build(dict(arch=arch, vocab_size=30, d_model=16, n_heads=2, n_layers=2, positional="rope",
                           mixer={"sliding_window": 3}, layer_pattern=pattern)).eval()
    prompt = torch.randint(3, 30, (2, 6))
    out = [model.generate(prompt, max_new_tokens=8, eos_token_id=[], use_cache=c, return_dict=True)
           for c in (True, False)]
    assert torch.equal(out[0].sequences, out[1].sequences)
    for a, b in zip(out[0].logits, out[1].logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    ids = torch.randint(3, 30, (2, 9))
    kwargs = {"decoder_input_ids": ids} if model.is_encoder_decoder else {}
    with torch.no_grad():
        fused = model(ids, **kwargs).logits
        explicit = model(ids, need_weights=True, **kwargs).logits
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_bad_window():
    with pytest.raises(ValueError, match="model.mixer.sliding_window must be a positive integer"):
        zoo.models.check_config(ModelConfig(mixer={"sliding_window": 0}))
