"""Multi-head Latent Attention (zoo.modules.mla) against transformers' DeepseekV3Attention built from a tiny
config: outputs and gradients, full-rank and low-rank queries, both rope layouts, YaRN's mscale, a padded
batch."""

import pytest
import torch

from zoo.config import ModelConfig
from zoo.modules.mask import build_mask
from zoo.modules.mla import LatentAttention
from zoo.modules.positional import Rotary

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf  # noqa: E402

HEADS, D_MODEL, LATENT, NOPE, ROPE, V = 4, 32, 16, 8, 4, 6
NAMES = {"q_proj": "q", "q_a_proj": "q_a", "q_a_layernorm": "q_norm", "q_b_proj": "q_b",
         "kv_a_proj_with_mqa": "kv_a", "kv_a_layernorm": "kv_norm", "kv_b_proj": "kv_b",
         "o_proj": "o"}  # transformers' DeepseekV3Attention -> zoo's LatentAttention
YARN = {"name": "yarn", "factor": 4.0, "original_max_len": 16, "mscale": 1.0, "mscale_all_dim": 0.8}


def _pair(q_lora_rank, interleave, yarn=False):
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if yarn:
        rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 0.8}
    config = hf.DeepseekV3Config(
        hidden_size=D_MODEL, num_attention_heads=HEADS, num_key_value_heads=HEADS, q_lora_rank=q_lora_rank,
        kv_lora_rank=LATENT, qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V,
        rope_interleave=interleave, attention_bias=False, rms_norm_eps=1e-6, max_position_embeddings=64,
        rope_parameters=rope, attn_implementation="eager", vocab_size=16, num_hidden_layers=1)
    theirs = hf.DeepseekV3Attention(config, layer_idx=0).double()
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 else 0.0))  # norms' gains near 1
    mixer = {"name": "mla", "q_lora_rank": q_lora_rank, "kv_lora_rank": LATENT, "qk_nope_head_dim": NOPE,
             "qk_rope_head_dim": ROPE, "v_head_dim": V}
    cfg = ModelConfig(d_model=D_MODEL, n_heads=HEADS, vocab_size=16, norm="rmsnorm", norm_eps=1e-6,
                      bias=False, max_seq_len=64, mixer=mixer,
                      positional={"name": "rope", "layout": "interleaved" if interleave else "half",
                                  "scaling": YARN if yarn else "none"})
    ours = LatentAttention(cfg).double()
    state = {f"{NAMES[k.split('.')[0]]}.{k.split('.', 1)[1]}": v for k, v in theirs.state_dict().items()}
    ours.load_state_dict(state)
    return theirs, hf.DeepseekV3RotaryEmbedding(config), ours, Rotary(cfg), cfg


@pytest.mark.parametrize("yarn", [False, True], ids=["plain", "yarn"])
@pytest.mark.parametrize("interleave", [True, False], ids=["interleaved", "half"])
@pytest.mark.parametrize("q_lora_rank", [None, 12], ids=["full_q", "low_rank_q"])
def test_equals_transformers_outputs_and_gradients(q_lora_rank, interleave, yarn):
    torch.manual_seed(0)
    theirs, their_rope, ours, our_rope, _ = _pair(q_lora_rank, interleave, yarn)
    b, t = 3, 7
    key_mask = torch.ones(b, t, dtype=torch.long)
    key_mask[1, :3] = 0  # left padding
    key_mask[2, 5:] = 0  # right padding
    position_ids = (key_mask.cumsum(-1) - 1).clamp(min=0)
    x = torch.randn(b, t, D_MODEL, dtype=torch.double)
    x_theirs, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    allowed = key_mask.bool()[:, None, None, :] & torch.ones(t, t, dtype=torch.bool).tril()
    additive = torch.zeros(b, 1, t, t, dtype=torch.double).masked_fill(~allowed, -1e9)
    cos, sin = their_rope(x, position_ids)
    expected, _ = theirs(x_theirs, (cos, sin), additive)
    mask = build_mask(key_mask, causal=True, q_len=t, k_len=t)
    terms = our_rope.terms(position_ids, 0, t, causal=True)
    got, _ = ours(x_ours, mask, positions=terms)
    real = key_mask.bool()  # pad queries: transformers attends uniformly, zoo outputs zeros
    assert (got[real] - expected[real]).abs().max() < 1e-5

    weight = torch.randn_like(got)
    (expected[real] * weight[real]).sum().backward()
    (got[real] * weight[real]).sum().backward()
    assert (x_ours.grad - x_theirs.grad).abs().max() < 1e-5
    for name, p in theirs.named_parameters():
        mine = ours.get_parameter(f"{NAMES[name.split('.')[0]]}.{name.split('.', 1)[1]}")
        assert (mine.grad - p.grad).abs().max() < 1e-5, name


def test_yarn_scales_softmax_by_mscale_all_dim_squared():
    """DeepSeek's YaRN: scores scaled by 1/sqrt(N + R) x (0.1 x 0.8 ln 4 + 1)^2; cos/sin by the mscale
    ratio."""
    _, their_rope, ours, our_rope, _ = _pair(None, True, yarn=True)
    all_dim = 0.1 * 0.8 * torch.log(torch.tensor(4.0)).item() + 1
    assert ours.scale == pytest.approx((NOPE + ROPE) ** -0.5 * all_dim**2)
    ratio = (0.1 * torch.log(torch.tensor(4.0)).item() + 1) / all_dim
    assert our_rope.scaling.attention_factor == pytest.approx(ratio)
    assert their_rope.attention_scaling == pytest.approx(ratio)
