"""`rope_local_base` (Gemma 3): the sliding-window layers rotate at their own base, unscaled, while the global
layers keep `rope_base` and `rope_scaling`. Checked against the closed form cos/sin(pos * base^(-2i/R)), end
to end (a stack whose layers are all local is the plain model at the local base), and its config checks."""

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
    cfg = ModelConfig(**TINY, rope_base=1e6, rope_local_base=1e4, rope_scaling="linear", rope_factor=4.0,
                      sliding_window=8, global_every=2)
    zoo.models.check_config(cfg)
    pos = torch.arange(20)
    terms = Rotary(cfg).terms(pos[None], 0, 20, causal=True)
    for local, angles in ((True, closed_form(pos, 1e4)), (False, closed_form(pos, 1e6, factor=4.0))):
        got = terms.for_layer(local)
        torch.testing.assert_close(got.cos[0, 0].double(), angles.cos(), atol=1e-5, rtol=0)
        torch.testing.assert_close(got.sin[0, 0].double(), angles.sin(), atol=1e-5, rtol=0)
    assert terms.for_layer(False) is terms and Rotary(ModelConfig(**TINY)).terms(pos[None], 0, 20,
                                                                                causal=True).local is None


@pytest.mark.parametrize("every", [0, 1], ids=["all_local", "all_global"])
def test_layers_rotate_at_the_base_their_kind_has(every):
    """All layers local (global_every 0): the model is the plain one at rope_base = the local base; all
    global (global_every 1): rope_local_base changes nothing."""
    window = dict(sliding_window=32, global_every=every)
    torch.manual_seed(0)
    model = zoo.build(ModelConfig(**TINY, **window, rope_base=1e6, rope_local_base=50.0)).eval()
    plain = zoo.build(ModelConfig(**TINY, **window, rope_base=50.0 if every == 0 else 1e6)).eval()
    plain.load_state_dict(model.state_dict())
    ids = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, plain(ids).logits, atol=1e-6, rtol=0)
        moved = zoo.build(ModelConfig(**TINY, **window, rope_base=1e6)).eval()
        moved.load_state_dict(model.state_dict())
        differs = (moved(ids).logits - model(ids).logits).abs().max() > 1e-3
    assert differs == (every == 0)


@pytest.mark.parametrize(("keys", "message"), [
    (dict(positional="learned", sliding_window=4), r"model.rope_local_base=10.0 is read by model.positional="
                                                   r"rope, not by model.positional=learned"),
    (dict(positional="rope"), r"model.rope_local_base=10.0 is the base of the sliding-window layers, but "
                              r"model.sliding_window is null"),
    (dict(positional="rope", sliding_window=4, rope_local_base=0.0), r"model.rope_local_base must be > 0"),
])
def test_rope_local_base_errors_name_the_key(keys, message):
    with pytest.raises(ValueError, match=message):
        zoo.build(ModelConfig(**TINY), **{"rope_local_base": 10.0, **keys})
