"""Test 4: a batch of mixed prompt lengths gives the same outputs as each prompt alone (every positional
scheme, greedy and beam search, decoder and encoder-decoder); padding side and cropping helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.generation.conftest import POSITIONALS, POSITIONED, tiny_decoder, tiny_seq2seq
from zoo.generation import pad_prompts
from zoo.generation.prompts import align, position_ids

PROMPTS = [[3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], [20, 21], [30, 31, 32, 33, 34, 35]]  # 14 > 12


def _strip_left(row: list[int], n_pad: int) -> list[int]:
    return row[n_pad:]


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("beams", [1, 3])
def test_mixed_lengths_equal_each_alone(positional, beams):
    model = tiny_decoder(positional)
    ids, mask = pad_prompts(PROMPTS, pad_id=0)
    kw = dict(max_new_tokens=8, eos_token_id=[], num_beams=beams)
    batch = model.generate(ids, attention_mask=mask, **kw)
    for i, prompt in enumerate(PROMPTS):
        alone = model.generate(torch.tensor([prompt]), **kw)[0].tolist()
        assert _strip_left(batch[i].tolist(), ids.shape[1] - len(prompt)) == alone


def test_right_padded_input_is_realigned():
    model = tiny_decoder("rope")
    ids, mask = pad_prompts(PROMPTS, 0, side="left")
    left = model.generate(ids, attention_mask=mask, max_new_tokens=4, eos_token_id=[])
    ids, mask = pad_prompts(PROMPTS, 0, side="right")
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=4, eos_token_id=[]), left)
    assert torch.equal(model.generate(PROMPTS, max_new_tokens=4, eos_token_id=[]), left)  # lists work too
    one = model.generate(torch.tensor(PROMPTS[1]), max_new_tokens=4, eos_token_id=[])
    assert torch.equal(model.generate(list(np.array(PROMPTS[1])), max_new_tokens=4, eos_token_id=[]), one)
    assert torch.equal(model.generate(np.array(PROMPTS[1]), max_new_tokens=4, eos_token_id=[]), one)


@pytest.mark.parametrize("positional", POSITIONED)
def test_mixed_source_lengths_equal_each_alone(positional):
    model = tiny_seq2seq(positional)
    sources = [[4, 5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    for beams in (1, 2):
        batch = model.generate(sources, max_new_tokens=6, eos_token_id=[], num_beams=beams)
        for i, src in enumerate(sources):
            alone = model.generate(torch.tensor([src]), max_new_tokens=6, eos_token_id=[], num_beams=beams)
            assert batch[i].tolist() == alone[0].tolist()


def test_learned_positions_crop_long_prompt_to_context():
    model = tiny_decoder("learned")  # max_seq_len 12
    long = list(range(3, 23))  # 20 tokens
    full = model.generate(torch.tensor([long]), max_new_tokens=3, eos_token_id=[], return_dict=True)
    cropped = model.generate(torch.tensor([long[-12:]]), max_new_tokens=1, eos_token_id=[], return_dict=True)
    assert full.sequences[0, :20].tolist() == long  # the whole prompt is returned
    torch.testing.assert_close(full.logits[0], cropped.logits[0], atol=1e-6, rtol=0)


def test_helpers_by_hand():
    ids, mask = pad_prompts([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert position_ids(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    right_ids, right_mask = align(ids, mask, 0, side="right")
    assert right_ids.tolist() == [[5, 6, 7], [8, 0, 0]] and right_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
