"""model.embed_multiplier and model.depth_scale (MiniCPM's scale_emb and scale_depth) against hand-written
references: the token embeddings times the multiplier (and sqrt(d_model) with embed_scale), every residual
branch of a stack times depth_scale / sqrt(that stack's depth), in every wiring and in each stack of an
encoder-decoder."""

from __future__ import annotations

import math

import pytest
import torch

import zoo
from tests.modules.test_residual import _reference
from zoo.modules.block import Block
from zoo.modules.mask import build_mask
from zoo.modules.residual import WIRINGS

TINY = {"arch": "decoder", "vocab_size": 30, "d_model": 16, "n_layers": 3, "n_heads": 2, "max_seq_len": 16}


@pytest.mark.parametrize("embed_scale", [False, True])
def test_token_embeddings_are_multiplied(embed_scale):
    torch.manual_seed(0)
    model = zoo.build({**TINY, "embed_multiplier": 12.0, "embed_scale": embed_scale, "positional": "none"})
    ids = torch.randint(0, 30, (2, 5))
    out = model(ids, output_hidden_states=True).all_hidden_states[0]
    factor = 12.0 * (math.sqrt(16) if embed_scale else 1.0)
    torch.testing.assert_close(out, model.embed.tokens.weight[ids] * factor)


@pytest.mark.parametrize("wiring", WIRINGS.names())
def test_each_residual_branch_is_scaled_in_every_wiring(wiring):
    """A block of a 3-deep stack scales what each sub-layer adds to the stream by 1.4 / sqrt(3): the
    wiring's textbook reference whose branch outputs (the output projections, or the post norms where the
    wiring has them) are scaled by hand."""
    torch.manual_seed(0)
    cfg = zoo.config.ModelConfig(d_model=16, n_heads=2, n_layers=3, norm_placement=wiring, depth_scale=1.4)
    stack = zoo.modules.block.Stack(cfg, 3)
    block = stack.layers[0]
    assert block.branch_scale == pytest.approx(1.4 / math.sqrt(3))
    x = torch.randn(2, 5, 16)
    mask = build_mask(None, causal=True, q_len=5, k_len=5)
    got, _, _ = block(x, mask)
    plain = Block(cfg)  # the same weights, each branch's last affine map scaled by hand
    plain.load_state_dict(block.state_dict())
    with torch.no_grad():
        post = [m for n, m in plain.named_children() if n.startswith("post_norm_")]
        for module in post or [plain.self_attn.o, plain.ffn.down]:  # a branch's output: its post norm's
            module.weight.mul_(block.branch_scale)
            module.bias.mul_(block.branch_scale)
    torch.testing.assert_close(got, _reference(plain, wiring, x, None), rtol=1e-5, atol=1e-5)


def test_each_stack_scales_by_its_own_depth():
    model = zoo.build({**TINY, "arch": "encoder_decoder", "encoder_layers": 4, "decoder_layers": 1,
                       "depth_scale": 2.0})
    assert {layer.branch_scale for layer in model.encoder_stack.layers} == {1.0}
    assert {layer.branch_scale for layer in model.decoder_stack.layers} == {2.0}
    mtp = zoo.build({**TINY, "depth_scale": 1.4, "mtp": "sequential", "positional": "rope"})
    assert mtp.mtp.layers[0].block.branch_scale == mtp.decoder_stack.layers[0].branch_scale


@pytest.mark.parametrize("key, value, message", [
    ("embed_multiplier", 0, "model.embed_multiplier must be a finite number > 0, got 0"),
    ("depth_scale", -1.0, "model.depth_scale must be a finite number > 0 (or null: unscaled), got -1.0"),
])
def test_bad_values_are_named(key, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        zoo.build({**TINY, key: value})
