"""`learned` with `skip_pads` (RoBERTa): the table rows read at every position, pads included, equal
transformers' RobertaEmbeddings.create_position_ids_from_input_ids for a tokenizer's mask (ids != pad_id)."""

from __future__ import annotations

import pytest
import torch
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

import zoo

PAD, D, MAX_LEN = 1, 4, 20


def _model(**overrides):
    cfg = dict(arch="encoder", vocab_size=10, d_model=D, n_heads=1, n_layers=1, pad_id=PAD,
               positional={"name": "learned", "offset": PAD + 1, "skip_pads": True}, max_seq_len=MAX_LEN)
    model = zoo.build(cfg, **overrides)
    with torch.no_grad():  # row i holds i: the embedding returns the row index it read
        table = model.embed.positional.table
        table.weight.copy_(torch.arange(table.num_embeddings, dtype=torch.float)[:, None].expand(-1, D))
    return model


def _rows_read(model, ids, mask, start: int = 0) -> torch.Tensor:
    pos = model.position_ids(model.embed, ids[:, start:], start, None, attention_mask=mask)
    return model.embed.positional.add(torch.zeros(*pos.shape, D), pos)[..., 0].long()


IDS = torch.tensor([
    [0, 5, 6, 7, 8, 2],  # full
    [0, 5, 6, 2, PAD, PAD],  # right-padded
    [PAD, PAD, PAD, 0, 4, 2],  # left-padded
    [0, 2, PAD, PAD, PAD, PAD],
])


def test_every_position_reads_robertas_row():
    model = _model()
    mask = (IDS != PAD).long()
    expected = RobertaEmbeddings.create_position_ids_from_input_ids(IDS, padding_idx=PAD)
    assert torch.equal(_rows_read(model, IDS, mask), expected)


def test_continuing_from_a_cache_reads_the_same_rows():
    """With past tokens (start > 0) the mask covers past + new, so new tokens count the past's real tokens."""
    model = _model()
    mask = (IDS != PAD).long()
    full = _rows_read(model, IDS, mask)
    for start in (1, 3, 5):
        assert torch.equal(_rows_read(model, IDS, mask, start), full[:, start:])


def test_without_a_mask_positions_are_consecutive():
    model = _model()
    got = _rows_read(model, IDS[:1], None)
    assert torch.equal(got, torch.arange(PAD + 1, PAD + 1 + IDS.shape[1])[None])


def test_default_learned_positions_ignore_the_mask():
    model = _model(positional={"skip_pads": False, "offset": 0})
    mask = (IDS != PAD).long()
    assert torch.equal(_rows_read(model, IDS, mask), torch.arange(IDS.shape[1]).expand_as(IDS))


def test_pad_row_must_exist():
    with pytest.raises(ValueError, match=r"model.positional.skip_pads=true .*pad_id=30.*21 rows"):
        zoo.build(dict(arch="encoder", vocab_size=40, d_model=D, n_heads=1, n_layers=1, pad_id=30,
                       positional={"name": "learned", "offset": 1, "skip_pads": True}, max_seq_len=MAX_LEN))
