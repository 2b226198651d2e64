"""Tests 2 and 5: greedy against a textbook loop, num_beams=1 / top_k=1 / temperature->0 equal greedy,
seeded sampling is reproducible, and the sampling processors against hand-computed distributions."""

from __future__ import annotations

import math

import pytest
import torch

from tests.generation.conftest import naive_greedy, tiny_decoder, tiny_seq2seq
from zoo.generation.api import STEPPERS
from zoo.generation.beam import beam_search
from zoo.generation.logits import top_k, top_p
from zoo.generation.prompts import as_batch


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_greedy_matches_textbook_loop(positional):
    model = tiny_decoder(positional)
    prompt = [3, 14, 15, 9, 2 + 20]
    got = model.generate(torch.tensor([prompt]), max_new_tokens=15, eos_token_id=[])  # passes max_seq_len
    assert got[0].tolist() == naive_greedy(model, prompt, 15)


def _beam_search_1(model, ids, **kw):
    """The beam-search algorithm itself with one beam (generate() routes num_beams=1 to greedy)."""
    ids, mask = as_batch(ids, None, model.config.vocab_size)
    stepper = STEPPERS.get(model.config.arch)(model, ids, mask, model.config.pad_id, True)
    with torch.no_grad():
        return beam_search(stepper, 1, pad_id=model.config.pad_id, length_penalty=1.0, early_stopping=False,
                           num_return_sequences=1, **kw)


@pytest.mark.parametrize("build", [tiny_decoder, tiny_seq2seq], ids=["decoder", "encoder_decoder"])
def test_num_beams_1_equals_greedy_with_eos(build):
    model = build("rope")
    ids = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]])
    free = model.generate(ids, max_new_tokens=8, eos_token_id=[])
    start = free.shape[1] - 8
    eos = int(free[0, start + 3])  # a token greedy emits in row 0: as EOS it ends that row early
    first = start + int((free[0, start:] == eos).nonzero()[0])
    greedy = model.generate(ids, max_new_tokens=8, eos_token_id=eos)
    assert greedy[0, first] == eos and (greedy[0, first + 1 :] == model.config.pad_id).all()  # padded
    assert torch.equal(greedy, model.generate(ids, max_new_tokens=8, eos_token_id=eos, num_beams=1))
    beam = _beam_search_1(model, ids, max_new_tokens=8, eos_ids=[eos])
    assert torch.equal(beam.sequences, greedy)


def test_beam_1_equals_greedy_encoder_decoder():
    model = tiny_seq2seq()
    src = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 11]])
    assert torch.equal(model.generate(src, max_new_tokens=6),
                       model.generate(src, max_new_tokens=6, num_beams=1))


@pytest.mark.parametrize("knobs",
                         [dict(top_k=1), dict(temperature=0.0), dict(temperature=1e-6),
                          dict(temperature=1e-40), dict(top_p=1e-4), dict(top_k=1, temperature=3.0)])
def test_degenerate_sampling_equals_greedy(knobs):
    model = tiny_decoder("alibi")
    ids = torch.tensor([[3, 4, 5], [6, 7, 8]])
    greedy = model.generate(ids, max_new_tokens=10, eos_token_id=[])
    sampled = model.generate(ids, max_new_tokens=10, eos_token_id=[], do_sample=True, seed=123, **knobs)
    assert torch.equal(greedy, sampled)


def test_seeded_sampling_reproducible():
    model = tiny_decoder("rope")
    ids = torch.tensor([[3, 4, 5]])
    kw = dict(max_new_tokens=12, do_sample=True, temperature=1.5, top_k=20, top_p=0.95, eos_token_id=[],
              num_return_sequences=3)
    a, b, c = (model.generate(ids, seed=s, **kw) for s in (7, 7, 8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.shape == (3, 15) and len({tuple(r) for r in a.tolist()}) > 1  # 3 samples, not copies


def test_sampling_frequencies_follow_processed_distribution():
    """Empirical next-token frequencies match softmax(logits / T) restricted by top-k (chi-square-free
    check: each frequency within 4 standard errors of the hand-computed probability)."""
    model = tiny_decoder("none", n_layers=1)
    ids = torch.tensor([[3, 4]])
    n = 4000
    out = model.generate(ids.expand(n, 2), max_new_tokens=1, do_sample=True, temperature=2.0, top_k=5,
                         eos_token_id=[], seed=0, return_dict=True)
    logits = out.logits[0][0]
    keep = logits.topk(5).indices
    probs = torch.zeros_like(logits)
    probs[keep] = (logits[keep] / 2.0).softmax(-1)
    counts = torch.bincount(out.sequences[:, -1], minlength=len(logits)).float() / n
    se = (probs * (1 - probs) / n).sqrt()
    assert (counts[probs == 0] == 0).all()
    assert ((counts - probs).abs() <= 4 * se + 1e-9).all()


def test_top_p_and_top_k_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    inf = float("-inf")
    kept = top_p(0.8)(logits)  # 0.5 + 0.3 reaches 0.8: keep two
    assert torch.isinf(kept[0, 2:]).all() and torch.isfinite(kept[0, :2]).all()
    kept = top_p(0.81)(logits)  # needs the third
    assert torch.isfinite(kept[0, :3]).all() and kept[0, 3] == inf
    assert torch.isfinite(top_p(1.0)(logits)).all()
    kept = top_k(2)(logits[:, [3, 0, 2, 1]])  # order-independent
    assert torch.isinf(kept).tolist() == [[True, False, True, False]]
    assert math.isclose(float(top_p(0.5)(logits).softmax(-1)[0, 0]), 1.0)
