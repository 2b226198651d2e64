"""Every residual wiring against a hand-written reference layer (plain functional code, same weights):
pre, post, sandwich (Gemma 2), post_sublayer (OLMo 2), parallel (GPT-NeoX) and parallel_shared (GPT-J, Phi-2),
with and without cross-attention."""

import math

import pytest
import torch
import torch.nn.functional as F

from zoo.config import ModelConfig
from zoo.modules.block import Block
from zoo.modules.mask import build_mask
from zoo.modules.residual import WIRINGS


def _attend(attn, x, memory=None, causal=False):
    """softmax(q k^T / sqrt(D) [+ causal -inf]) v, heads concatenated, W_O: written out by hand."""
    h, d = attn.n_heads, attn.head_dim
    if memory is None:
        q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(h * d, dim=-1)
    else:
        q = x @ attn.q.weight.T + attn.q.bias
        k, v = (memory @ attn.kv.weight.T + attn.kv.bias).split(h * d, dim=-1)
    split = lambda t: t.view(t.shape[0], t.shape[1], h, d).transpose(1, 2)  # noqa: E731  (B, H, T, D)
    scores = split(q) @ split(k).transpose(-2, -1) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(x.shape)
    return out @ attn.o.weight.T + attn.o.bias


def _ffn(ffn, x):
    return F.gelu(x @ ffn.up.weight.T + ffn.up.bias) @ ffn.down.weight.T + ffn.down.bias


def _ln(norm, x):
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


def _reference(block, wiring, x, memory):
    """The textbook formula of each wiring, one line per sub-layer."""
    subs = [("self", lambda h: _attend(block.self_attn, h, causal=True))]
    if memory is not None:
        subs.append(("cross", lambda h: _attend(block.cross_attn, h, memory)))
    subs.append(("ffn", lambda h: _ffn(block.ffn, h)))
    norm = lambda name, h: _ln(getattr(block, f"norm_{name}"), h)  # noqa: E731
    if wiring == "parallel":  # x + sum_i f_i(norm_i(x))
        return x + sum(f(norm(name, x)) for name, f in subs)
    if wiring == "parallel_shared":  # x + sum_i f_i(norm(x)), one norm
        return x + sum(f(norm("self", x)) for _, f in subs)
    for name, f in subs:
        if wiring == "pre":  # x + f(norm(x))
            x = x + f(norm(name, x))
        elif wiring == "post":  # norm(x + f(x))
            x = norm(name, x + f(x))
        elif wiring == "sandwich":  # x + post_norm(f(norm(x)))
            x = x + _ln(getattr(block, f"post_norm_{name}"), f(norm(name, x)))
        elif wiring == "post_sublayer":  # x + post_norm(f(x))
            x = x + _ln(getattr(block, f"post_norm_{name}"), f(x))
    return x


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("wiring", WIRINGS.names())
def test_wiring_matches_hand_written_layer(wiring, cross):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_heads=2, norm_placement=wiring, activation="gelu", dropout=0.0)
    block = Block(cfg, cross=cross).eval()
    with torch.no_grad():  # non-trivial norm gains/biases so a missing or swapped norm shows
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x, memory = torch.randn(2, 5, 16), (torch.randn(2, 7, 16) if cross else None)
    mask = build_mask(None, causal=True, q_len=5, k_len=5)
    memory_mask = build_mask(None, causal=False, q_len=5, k_len=7) if cross else None
    with torch.no_grad():
        out, _, _ = block(x, mask, memory=memory, memory_mask=memory_mask)
        ref = _reference(block, wiring, x, memory)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_sandwich_and_parallel_norm_names():
    """Pre/post keep the module names existing checkpoints use; sandwich adds post_norm_*."""
    names = lambda w: {n for n, _ in Block(ModelConfig(d_model=8, n_heads=2, norm_placement=w),  # noqa: E731
                                           cross=True).named_children() if "norm" in n}
    assert names("pre") == names("post") == names("parallel") == {"norm_self", "norm_cross", "norm_ffn"}
    assert names("sandwich") == {"norm_self", "norm_cross", "norm_ffn",
                                 "post_norm_self", "post_norm_cross", "post_norm_ffn"}
    assert names("parallel_shared") == {"norm_self"}
    assert names("post_sublayer") == {"post_norm_self", "post_norm_cross", "post_norm_ffn"}


@pytest.mark.parametrize("wiring", WIRINGS.names())
def test_final_norm_default_belongs_to_the_wiring(wiring):
    import zoo

    model = zoo.build(dict(arch="decoder", d_model=8, n_heads=2, n_layers=1, norm_placement=wiring))
    has_final = not isinstance(model.decoder_stack.final_norm, torch.nn.Identity)
    assert has_final == (wiring != "post")  # post-LN ends every sub-layer in a norm already
    forced = zoo.build(dict(arch="decoder", d_model=8, n_heads=2, n_layers=1, norm_placement=wiring,
                            final_norm=not has_final))
    assert isinstance(forced.decoder_stack.final_norm, torch.nn.Identity) == has_final
