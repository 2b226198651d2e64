"""Positional schemes against transformers' own code, built locally from configs: partial rotary (GPT-NeoX's
rotate-half over the first R features, with each frequency scaling; GPT-J's interleaved pairs) and
RoBERTa's padded position ids on a learned table."""

from __future__ import annotations

import pytest
import torch
from transformers import GPTNeoXConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_rotate
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_rotate
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

import zoo
from zoo.config import ModelConfig
from zoo.modules.positional import Learned, Rotary

HEAD, HEADS, THETA = 32, 2, 500.0

SCALINGS = {  # zoo's model.positional.scaling, transformers rope_parameters
    "none": ({"name": "none"}, {"rope_type": "default"}),
    "linear": ({"name": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 2.0}),
    "llama3": ({"name": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_len": 32},
               {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32}),
    "yarn": ({"name": "yarn", "factor": 4.0, "original_max_len": 32},
             {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
}


@pytest.mark.parametrize("scaling", sorted(SCALINGS))
@pytest.mark.parametrize("fraction", [0.25, 0.4, 1.0])
def test_partial_rotary_matches_gpt_neox(fraction, scaling):
    """GPT-NeoX rotates the first int(D * rotary_pct) features in the rotate-half layout (over that slice)
    and passes the rest; cos/sin carry the scaling's attention factor."""
    zoo_scaling, hf_params = SCALINGS[scaling]
    cfg = ModelConfig(d_model=HEAD * HEADS, n_heads=HEADS, max_seq_len=128,
                      positional={"name": "rope", "base": THETA, "fraction": fraction,
                                  "scaling": zoo_scaling})
    zoo.models.check_config(cfg)
    hf_cfg = GPTNeoXConfig(hidden_size=HEAD * HEADS, num_attention_heads=HEADS, max_position_embeddings=128,
                           rope_parameters={"rope_theta": THETA, "partial_rotary_factor": fraction,
                                            **hf_params})
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, HEADS, 7, HEAD, generator=gen), torch.randn(2, HEADS, 7, HEAD, generator=gen)
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [40, 41, 42, 90, 91, 92, 127]])
    cos, sin = GPTNeoXRotaryEmbedding(hf_cfg)(q, position_ids)
    q_ref, k_ref = neox_rotate(q, k, cos, sin)
    terms = Rotary(cfg).terms(position_ids, 0, 7, causal=False)
    rotated = int(HEAD * fraction)
    assert terms.cos.shape == (2, 1, 7, rotated // 2)
    q_got, k_got = terms.rotate(q), terms.rotate(k)
    assert torch.allclose(q_got, q_ref, atol=1e-5) and torch.allclose(k_got, k_ref, atol=1e-5)
    assert torch.equal(q_got[..., rotated:], q[..., rotated:])  # the unrotated features pass unchanged


def test_partial_rotary_interleaved_matches_gpt_j():
    """GPT-J rotates pairs (2i, 2i+1) of the first rotary_dim features (rotate_every_two)."""
    rotary_dim, n = 8, 12
    cfg = ModelConfig(d_model=HEAD * HEADS, n_heads=HEADS,
                      positional={"name": "rope", "layout": "interleaved", "fraction": rotary_dim / HEAD})
    x = torch.randn(2, n, HEADS, HEAD)  # GPT-J rotates (B, T, H, D)
    position_ids = torch.arange(n).expand(2, n)
    sincos = create_sinusoidal_positions(n, rotary_dim)[position_ids]
    sin, cos = torch.split(sincos, rotary_dim // 2, dim=-1)
    expected = torch.cat([gptj_rotate(x[..., :rotary_dim], sin, cos), x[..., rotary_dim:]], dim=-1)
    got = Rotary(cfg).terms(position_ids, 0, n, causal=False).rotate(x.transpose(1, 2)).transpose(1, 2)
    assert torch.allclose(got, expected, atol=1e-5)


def test_roberta_positions_are_learned_with_offset_pad_plus_one():
    """RoBERTa's ids are cumsum(not pad) * (not pad) + pad_id: real tokens index the table from pad_id + 1.
    zoo's `learned` with offset = pad_id + 1 indexes the same rows at every real token of a right-padded
    batch (default positions) and of a left-padded one (position_ids = cumsum(mask) - 1, zoo's convention);
    pad tokens, whose outputs nothing reads, index other rows. Checked through the embedding itself: a table
    whose row i holds i returns the row index it read."""
    pad, d, max_len = 1, 4, 20
    ids = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 5, 6, 2, pad, pad], [0, 2, pad, pad, pad, pad]])
    expected = RobertaEmbeddings.create_position_ids_from_input_ids(ids, padding_idx=pad)
    model = zoo.build(dict(arch="encoder", vocab_size=10, d_model=d, n_heads=1, n_layers=1,
                           positional={"name": "learned", "offset": pad + 1}, pad_id=pad,
                           max_seq_len=max_len))
    scheme = model.embed.positional
    assert isinstance(scheme, Learned)
    with torch.no_grad():
        scheme.table.weight.copy_(torch.arange(max_len + pad + 1, dtype=torch.float)[:, None].expand(-1, d))
    real = ids != pad

    def rows_read(position_ids: torch.Tensor) -> torch.Tensor:
        return scheme.add(torch.zeros(*ids.shape, d), position_ids)[..., 0].long()

    right = model.position_ids(model.embed, ids, 0, None)  # what the model uses without position_ids
    assert torch.equal(rows_read(right)[real], expected[real])
    # pads first
    left_ids = torch.stack([row.roll(int((~r).sum())) for row, r in zip(ids, real, strict=True)])
    left_mask = (left_ids != pad).long()
    left = (left_mask.cumsum(-1) - 1).clamp(min=0)
    left_expected = RobertaEmbeddings.create_position_ids_from_input_ids(left_ids, padding_idx=pad)
    assert torch.equal(rows_read(left)[left_mask.bool()], left_expected[left_mask.bool()])
