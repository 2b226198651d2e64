"""`positional.local_base` (Gemma 3): the sliding-window layers rotate at their own base, unscaled, while
the global layers keep `positional.base` and `positional.scaling`. Checked against the closed form
cos/sin(pos * base^(-2i/R)), end to end (a stack whose layers are all local is the plain model at the local
base), and its config checks."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.config import ModelConfig
from zoo.modules.positional import Rotary

HEAD = 16
TINY = dict(vocab_size=50, d_model=32, n_heads=2, n_layers=2, d_ff=48, max_seq_len=32, positional="rope",
            init_std=0.3)  # weights large enough for the positions to move the logits


def closed_form(positions: torch.Tensor, base: float, factor: float = 1.0) -> torch.Tensor:
    """(T, R/2) angles pos * base^(-2i/R) / factor."""
    inv = base ** (-torch.arange(0, HEAD, 2, dtype=torch.float64) / HEAD) / factor
    return positions.double()[:, None] * inv


def test_local_and_global_terms_match_the_closed_form():
    cfg = ModelConfig(**{**TINY, "positional": {"name": "rope", "base": 1e6, "local_base": 1e4,
                                                "scaling": {"name": "linear", "factor": 4.0}}},
                      mixer={"sliding_window": 8}, layer_pattern=["local", "global"])
    zoo.models.check_config(cfg)
    pos = torch.arange(20)
    terms = Rotary(cfg).terms(pos[None], 0, 20, causal=True)
    for local, angles in ((True, closed_form(pos, 1e4)), (False, closed_form(pos, 1e6, factor=4.0))):
        got = terms.for_layer(local)
        torch.testing.assert_close(got.cos[0, 0].double(), angles.cos(), atol=1e-5, rtol=0)
        torch.testing.assert_close(got.sin[0, 0].double(), angles.sin(), atol=1e-5, rtol=0)
    assert terms.for_layer(False) is terms and Rotary(ModelConfig(**TINY)).terms(pos[None], 0, 20,
                                                                                causal=True).local is None


def test_layers_rotate_at_the_base_their_kind_has():
    """All layers local (a window, no layer tagged): the model is the plain one at positional.base = the
    local base, and moving positional.base alone changes nothing it computes. (Every layer global with a
    local_base set is refused: see below.)"""
    window = dict(mixer={"sliding_window": 32})
    torch.manual_seed(0)
    model = zoo.build(TINY, **window, positional={"base": 1e6, "local_base": 50.0}).eval()
    plain = zoo.build(TINY, **window, positional={"base": 50.0}).eval()
    plain.load_state_dict(model.state_dict())
    ids = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, plain(ids).logits, atol=1e-6, rtol=0)
        moved = zoo.build(TINY, **window, positional={"base": 1e6}).eval()
        moved.load_state_dict(model.state_dict())
        differs = (moved(ids).logits - model(ids).logits).abs().max() > 1e-3
    assert differs


@pytest.mark.parametrize(("keys", "message"), [
    (dict(positional={"name": "learned", "local_base": 10.0}, mixer={"sliding_window": 4}),
     r"model.positional=learned has no key 'local_base'. model.positional.local_base is read by "
     r"positional=rope"),
    (dict(positional={"local_base": 10.0}),
     r"model.positional.local_base=10.0 is the base of the sliding-window layers, but no layer is local "
     r"\(model.mixer.sliding_window is null, or model.layer_pattern tags every layer global\)"),
    (dict(positional={"local_base": 10.0}, mixer={"sliding_window": 4}, layer_pattern=["global"]),
     r"model.positional.local_base=10.0 is the base of the sliding-window layers, but no layer is local "
     r"\(.*model.layer_pattern tags every layer global\); give local layers or drop it"),
    (dict(positional={"local_base": 0.0}, mixer={"sliding_window": 4}),
     r"model.positional.local_base must be .*> 0"),
])
def test_rope_local_base_errors_name_the_key(keys, message):
    with pytest.raises(ValueError, match=message):
        zoo.build(ModelConfig(**TINY), **keys)
