"""Attention's output gate (`model.mixer.output_gate`, Qwen3-Next / Qwen3.5's gated attention) against
transformers' Qwen3NextAttention built from a tiny config: outputs and gradients on a left- and right-padded
batch, GQA, per-head q/k norms (1 + w) and partial RoPE as Qwen3-Next has them."""

import pytest
import torch

from zoo.config import ModelConfig
from zoo.modules.attention import Attention
from zoo.modules.mask import build_mask
from zoo.modules.positional import Rotary

transformers = pytest.importorskip("transformers")
from transformers.models.qwen3_next import modeling_qwen3_next as hf  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, D_MODEL = 4, 2, 8, 32


def _pair():
    config = hf.Qwen3NextConfig(
        hidden_size=D_MODEL, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        partial_rotary_factor=0.5, attention_bias=False, rms_norm_eps=1e-6, max_position_embeddings=64,
        num_hidden_layers=1, layer_types=["full_attention"], vocab_size=16, attn_implementation="eager")
    theirs = hf.Qwen3NextAttention(config, layer_idx=0).double()
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    cfg = ModelConfig(d_model=D_MODEL, n_heads=HEADS, n_kv_heads=KV_HEADS, head_dim=HEAD_DIM, vocab_size=16,
                      norm="rmsnorm_1p", norm_eps=1e-6, bias=False, max_seq_len=64,
                      mixer={"output_gate": True, "qk_norm": True},
                      positional={"name": "rope", "fraction": 0.5,
                                  "base": config.rope_parameters["rope_theta"]})
    ours = Attention(cfg).double()
    q_and_gate = theirs.q_proj.weight.view(HEADS, 2 * HEAD_DIM, D_MODEL)  # rows [q_h | gate_h] per head
    q, gate = (w.reshape(HEADS * HEAD_DIM, D_MODEL) for w in q_and_gate.split(HEAD_DIM, dim=1))
    ours.load_state_dict({
        "qkv.weight": torch.cat([q, theirs.k_proj.weight, theirs.v_proj.weight]), "gate.weight": gate,
        "o.weight": theirs.o_proj.weight, "q_norm.weight": theirs.q_norm.weight,
        "k_norm.weight": theirs.k_norm.weight})
    return theirs, hf.Qwen3NextRotaryEmbedding(config), ours, Rotary(cfg)


def test_equals_transformers_gated_attention_outputs_and_gradients():
    torch.manual_seed(0)
    theirs, their_rope, ours, our_rope = _pair()
    b, t = 3, 7
    key_mask = torch.ones(b, t, dtype=torch.long)
    key_mask[1, :3] = 0  # left padding
    key_mask[2, 5:] = 0  # right padding
    position_ids = (key_mask.cumsum(-1) - 1).clamp(min=0)
    x = torch.randn(b, t, D_MODEL, dtype=torch.double)
    x_theirs, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    allowed = key_mask.bool()[:, None, None, :] & torch.ones(t, t, dtype=torch.bool).tril()
    additive = torch.zeros(b, 1, t, t, dtype=torch.double).masked_fill(~allowed, -1e9)
    expected, _ = theirs(x_theirs, their_rope(x, position_ids), additive)
    got, _ = ours(x_ours, build_mask(key_mask, causal=True, q_len=t, k_len=t),
                  positions=our_rope.terms(position_ids, 0, t, causal=True))
    real = key_mask.bool()  # pad queries: transformers attends uniformly, zoo outputs zeros
    assert (got[real] - expected[real]).abs().max() < 1e-5

    weight = torch.randn_like(got)
    (expected[real] * weight[real]).sum().backward()
    (got[real] * weight[real]).sum().backward()
    assert (x_ours.grad - x_theirs.grad).abs().max() < 1e-5
    q_grad, gate_grad = theirs.q_proj.weight.grad.view(HEADS, 2 * HEAD_DIM, D_MODEL).split(HEAD_DIM, dim=1)
    assert (ours.gate.weight.grad - gate_grad.reshape(-1, D_MODEL)).abs().max() < 1e-5
    assert (ours.qkv.weight.grad[: HEADS * HEAD_DIM] - q_grad.reshape(-1, D_MODEL)).abs().max() < 1e-5


def test_without_the_gate_the_output_differs():
    """The gate is applied (a mixer without it, same other weights, gives another output)."""
    _, _, ours, our_rope = _pair()
    x = torch.randn(2, 5, D_MODEL, dtype=torch.double)
    mask = build_mask(None, causal=True, q_len=5, k_len=5)
    positions = our_rope.terms(torch.arange(5).expand(2, 5), 0, 5, causal=True)
    gated, _ = ours(x, mask, positions=positions)
    ours.gate = None
    plain, _ = ours(x, mask, positions=positions)
    assert (gated - plain).abs().max() > 1e-3


def test_tensor_parallel_is_refused_naming_the_key():
    from zoo.training.tensor_parallel import check_tensor_parallel

    cfg = ModelConfig(d_model=D_MODEL, n_heads=HEADS, mixer={"output_gate": True})
    with pytest.raises(ValueError, match="cannot split model.mixer.output_gate: true adds a gate projection"):
        check_tensor_parallel(cfg, 2, 2)
