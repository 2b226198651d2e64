"""Attention knobs against transformers' own attention modules (built locally from small configs, eager
attention, same weights): an explicit head size apart from d_model / n_heads with per-head q/k RMSNorm
(Qwen3), q/k RMSNorm over the whole projections (OLMo 2), q/k/v-only biases (Qwen2), a soft cap on the scores
and a query scale override (Gemma 2); the final-logit soft cap against its closed form."""

import pytest
import torch

from zoo.config import ModelConfig
from zoo.models import check_config
from zoo.modules.attention import Attention
from zoo.modules.heads import LMHead
from zoo.modules.mask import build_mask
from zoo.modules.positional import Rotary

transformers = pytest.importorskip("transformers")

T = 7


def _hf_attention(kind: str):
    """(HF attention module, its rotary embedding, the matching zoo config)."""
    common = dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, vocab_size=32,
                  max_position_embeddings=64, rms_norm_eps=1e-6, attn_implementation="eager")
    if kind == "qwen3":  # head_dim 8: q projects 16 -> 32, o 32 -> 16
        from transformers.models.qwen3 import modeling_qwen3 as m

        hf_cfg = transformers.Qwen3Config(head_dim=8, attention_bias=False, **common)
        attn, rope = m.Qwen3Attention(hf_cfg, layer_idx=0), m.Qwen3RotaryEmbedding(hf_cfg)
        ours = dict(head_dim=8, mixer={"qk_norm": True}, bias=False)
    elif kind == "olmo2":  # q_norm over all 4 * 8 q features, k_norm over 2 * 8
        from transformers.models.olmo2 import modeling_olmo2 as m

        hf_cfg = transformers.Olmo2Config(head_dim=8, **common)
        attn, rope = m.Olmo2Attention(hf_cfg, layer_idx=0), m.Olmo2RotaryEmbedding(hf_cfg)
        ours = dict(head_dim=8, mixer={"qk_norm": True, "qk_norm_scope": "all"}, bias=False)
    elif kind == "qwen2":  # biases on q, k, v only
        from transformers.models.qwen2 import modeling_qwen2 as m

        hf_cfg = transformers.Qwen2Config(**common)
        attn, rope = m.Qwen2Attention(hf_cfg, layer_idx=0), m.Qwen2RotaryEmbedding(hf_cfg)
        ours = dict(mixer={"qkv_bias": True}, bias=False)
    else:  # gemma2: scores * query_pre_attn_scalar^-0.5, then 30 * tanh(scores / 30)
        from transformers.models.gemma2 import modeling_gemma2 as m

        hf_cfg = transformers.Gemma2Config(head_dim=8, query_pre_attn_scalar=12, attn_logit_softcapping=3.0,
                                           attention_bias=False, sliding_window=64, **common)
        hf_cfg.layer_types = ["full_attention"]
        attn, rope = m.Gemma2Attention(hf_cfg, layer_idx=0), m.Gemma2RotaryEmbedding(hf_cfg)
        ours = dict(head_dim=8, bias=False, mixer={"scale": 12**-0.5, "softcap": 3.0})
    cfg = ModelConfig(d_model=16, n_heads=4, n_kv_heads=2, norm="rmsnorm", norm_eps=1e-6,
                      positional={"name": "rope", "base": hf_cfg.rope_parameters["rope_theta"]}, **ours)
    return attn.eval(), rope, cfg


def _copy(ours: Attention, theirs) -> None:
    """HF's separate q/k/v projections into zoo's fused [q | k | v] (and their biases, norms)."""
    with torch.no_grad():
        for p in theirs.parameters():  # no all-ones gains or zero biases that could hide a swap
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 and p.shape[-1] == 8 else 0.0))
        projs = [theirs.q_proj, theirs.k_proj, theirs.v_proj]
        ours.qkv.weight.copy_(torch.cat([p.weight for p in projs]))
        if ours.qkv.bias is not None:
            ours.qkv.bias.copy_(torch.cat([p.bias for p in projs]))
        ours.o.weight.copy_(theirs.o_proj.weight)
        assert (ours.o.bias is None) == (theirs.o_proj.bias is None)
        if ours.qk_norm:
            ours.q_norm.weight.copy_(theirs.q_norm.weight)
            ours.k_norm.weight.copy_(theirs.k_norm.weight)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "weights"])
@pytest.mark.parametrize("kind", ["qwen3", "olmo2", "qwen2", "gemma2"])
def test_attention_knobs_match_transformers(kind, need_weights):
    torch.manual_seed(0)
    theirs, rope, cfg = _hf_attention(kind)
    ours = Attention(cfg).eval()
    _copy(ours, theirs)
    x = torch.randn(2, T, 16)
    pos = torch.arange(T)[None].expand(2, T)
    causal = torch.full((T, T), float("-inf")).triu(1)[None, None]  # (1, 1, T, T) additive
    with torch.no_grad():
        ref, ref_w = theirs(x, position_embeddings=rope(x, pos), attention_mask=causal)
        out, w = ours(x, build_mask(None, causal=True, q_len=T, k_len=T),
                      positions=Rotary(cfg).terms(pos, 0, T, causal=True), need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=1e-5)


def test_qk_norm_parameters_and_cache():
    """q/k norms are per-head (D features); decoding with the KV cache equals the full forward."""
    import zoo

    model = zoo.build(dict(arch="decoder", vocab_size=32, d_model=16, n_heads=4, n_kv_heads=2, head_dim=8,
                           mixer={"qk_norm": True, "softcap": 5.0}, positional="rope", norm="rmsnorm",
                           head={"softcap": 4.0}))
    attn = model.decoder_stack.layers[0].self_attn
    assert attn.q_norm.weight.shape == (8,) and attn.qkv.weight.shape == (8 * 4 + 2 * 8 * 2, 16)
    ids = torch.randint(0, 32, (2, 9))
    cache = model.new_cache()
    with torch.no_grad():
        full = model.eval()(ids).logits
        stepped = torch.cat([model(ids[:, :5], cache=cache).logits, model(ids[:, 5:], cache=cache).logits], 1)
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)
    assert full.abs().max() < 4.0  # the final soft cap bounds every logit


def test_head_softcap_is_c_tanh_of_logits():
    cfg = ModelConfig(d_model=8, n_heads=2, vocab_size=11, head={"softcap": 2.5})
    head = LMHead(cfg, torch.nn.Embedding(11, 8))
    x = torch.randn(3, 4, 8) * 10
    torch.testing.assert_close(head(x), 2.5 * torch.tanh((x @ head.proj.weight.T) / 2.5))


@pytest.mark.parametrize(("keys", "message"), [
    (dict(head_dim=0), "model.head_dim must be a positive integer"),
    (dict(mixer={"softcap": -1.0}), "model.mixer.softcap must be > 0"),
    (dict(mixer={"scale": 0.0}), "model.mixer.scale must be > 0"),
    (dict(mixer={"qk_norm": "yes"}), "model.mixer.qk_norm must be true or false"),
])
def test_bad_knob_values(keys, message):
    with pytest.raises(ValueError, match=message):
        check_config(ModelConfig(**keys))
