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


def _reference(block, wiring, x, memory, unnormed=()):
    """The textbook formula of each wiring, one line per sub-layer; sub-layers in `unnormed` read their
    input without the norm."""
    subs = [("self", lambda h: _attend(block.self_attn, h, causal=True))]
    if memory is not None:
        subs.append(("cross", lambda h: _attend(block.cross_attn, h, memory)))
    subs.append(("ffn", lambda h: _ffn(block.ffn, h)))
    norm = lambda name, h: h if name in unnormed else _ln(getattr(block, f"norm_{name}"), h)  # noqa: E731
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


@pytest.mark.parametrize("wiring", WIRINGS.names())
def test_first_attn_norm_false_drops_layer_0s_attention_norm_only(wiring):
    """ModernBERT's layer 0: x + attn(x), then x + ffn(norm(x)); every other norm stays. A wiring without an
    attention input norm of its own (post, post_sublayer, parallel_shared) refuses the knob by name."""
    import zoo
    from zoo.modules.block import Stack

    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=2, norm_placement=wiring, first_attn_norm=False)
    if not WIRINGS.get(wiring).input_norms:
        with pytest.raises(ValueError, match=rf"first_attn_norm=false .*model.norm_placement='{wiring}'"):
            zoo.build(cfg)
        return
    torch.manual_seed(0)
    stack = Stack(cfg, 2).eval()
    first, second = stack.layers
    assert isinstance(first.norm_self, torch.nn.Identity) and isinstance(first.norm_ffn, torch.nn.LayerNorm)
    assert isinstance(second.norm_self, torch.nn.LayerNorm)
    with torch.no_grad():
        for p in stack.parameters():
            p.add_(0.1 * torch.randn_like(p))
        x = 3.0 * torch.randn(2, 5, 16)  # far from unit scale: a norm left in place would show
        mask = build_mask(None, causal=True, q_len=5, k_len=5)
        out, _, _ = first(x, mask)
        torch.testing.assert_close(out, _reference(first, wiring, x, None, unnormed=("self",)),
                                   atol=1e-5, rtol=1e-5)
        assert (out - _reference(second, wiring, x, None)).abs().max() > 1e-2  # layer 1 keeps its norm


def test_first_attn_norm_hand_checked():
    """One head of width 2, identity q/k/v/o and no FFN: layer 0 without its attention norm returns
    x + mean of the (unnormalised) rows it attends to, worked out by hand; with the norm, the rows' mean
    after LayerNorm."""
    import zoo

    cfg = dict(arch="encoder", d_model=2, n_heads=1, n_layers=1, ffn="none", bias=False, positional="none",
               final_norm=False, mixer={"scale": 1e-9})  # scores ~0: uniform attention, an exact mean
    x = torch.tensor([[[1.0, 3.0], [5.0, -1.0]]])  # (B=1, T=2, C=2)
    expected = {False: x + torch.tensor([3.0, 1.0]),  # mean of the raw rows
                True: x + torch.tensor([0.0, 0.0])}  # LayerNorm rows (-1, 1) and (1, -1) average to 0
    for keep in (False, True):
        model = zoo.build({**cfg, "first_attn_norm": keep})
        block = model.encoder_stack.layers[0]
        with torch.no_grad():
            block.self_attn.qkv.weight.copy_(torch.eye(2).repeat(3, 1))
            block.self_attn.o.weight.copy_(torch.eye(2))
            out, _, _ = block(x, build_mask(None, causal=False, q_len=2, k_len=2))
        torch.testing.assert_close(out, expected[keep], atol=1e-4, rtol=0), keep
