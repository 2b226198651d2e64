"""Encoder-decoder stacks against torch.nn.Transformer with the same weights."""

import pytest
import torch
from torch import nn

import zoo
from zoo.modules.mask import build_mask

C, H, F_DIM, LAYERS = 32, 4, 64, 2


def _copy_attention(ours_qkv, ours_o, theirs: nn.MultiheadAttention):
    ours_qkv.weight.copy_(theirs.in_proj_weight)
    ours_qkv.bias.copy_(theirs.in_proj_bias)
    ours_o.weight.copy_(theirs.out_proj.weight)
    ours_o.bias.copy_(theirs.out_proj.bias)


def _copy_norm(ours: nn.LayerNorm, theirs: nn.LayerNorm):
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


def _copy_ffn(ours, layer):
    ours.up.weight.copy_(layer.linear1.weight)
    ours.up.bias.copy_(layer.linear1.bias)
    ours.down.weight.copy_(layer.linear2.weight)
    ours.down.bias.copy_(layer.linear2.bias)


@torch.no_grad()
def _load_from(model, ref: nn.Transformer):
    for ours, theirs in zip(model.encoder_stack.layers, ref.encoder.layers, strict=True):
        _copy_attention(ours.self_attn.qkv, ours.self_attn.o, theirs.self_attn)
        _copy_ffn(ours.ffn, theirs)
        _copy_norm(ours.norm_self, theirs.norm1)
        _copy_norm(ours.norm_ffn, theirs.norm2)
    for ours, theirs in zip(model.decoder_stack.layers, ref.decoder.layers, strict=True):
        _copy_attention(ours.self_attn.qkv, ours.self_attn.o, theirs.self_attn)
        cross = theirs.multihead_attn
        ours.cross_attn.q.weight.copy_(cross.in_proj_weight[:C])
        ours.cross_attn.q.bias.copy_(cross.in_proj_bias[:C])
        ours.cross_attn.kv.weight.copy_(cross.in_proj_weight[C:])
        ours.cross_attn.kv.bias.copy_(cross.in_proj_bias[C:])
        ours.cross_attn.o.weight.copy_(cross.out_proj.weight)
        ours.cross_attn.o.bias.copy_(cross.out_proj.bias)
        _copy_ffn(ours.ffn, theirs)
        _copy_norm(ours.norm_self, theirs.norm1)
        _copy_norm(ours.norm_cross, theirs.norm2)
        _copy_norm(ours.norm_ffn, theirs.norm3)
    _copy_norm(model.encoder_stack.final_norm, ref.encoder.norm)
    _copy_norm(model.decoder_stack.final_norm, ref.decoder.norm)


@pytest.mark.parametrize("placement", ["post", "pre"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_matches_torch_transformer(placement, activation):
    ref = nn.Transformer(
        d_model=C, nhead=H, num_encoder_layers=LAYERS, num_decoder_layers=LAYERS, dim_feedforward=F_DIM,
        dropout=0.0, activation=activation, batch_first=True, norm_first=placement == "pre",
    ).eval()
    # nn.Transformer always ends both stacks with a LayerNorm, so the post-LN model asks for one too.
    model = zoo.build(
        "transformer_tiny", d_model=C, n_heads=H, n_layers=LAYERS, encoder_layers=None, decoder_layers=None,
        d_ff=F_DIM, activation=activation, norm_placement=placement, final_norm=True, dropout=0.0,
    ).eval()
    _load_from(model, ref)

    src, tgt = torch.randn(2, 9, C), torch.randn(2, 6, C)
    src_keep = torch.ones(2, 9, dtype=torch.long)
    src_keep[1, 6:] = 0  # padded source: cross-attention must ignore those keys
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    expected = ref(src, tgt, tgt_mask=causal, src_key_padding_mask=src_keep == 0,
                   memory_key_padding_mask=src_keep == 0)

    memory, _, _ = model.encoder_stack(src, build_mask(src_keep, causal=False, q_len=9, k_len=9))
    out, _, _ = model.decoder_stack(
        tgt, build_mask(None, causal=True, q_len=6, k_len=6),
        memory=memory, memory_mask=build_mask(src_keep, causal=False, q_len=6, k_len=9),
    )
    assert torch.allclose(out, expected, atol=1e-5), (out - expected).abs().max()
