"""zoo.lm_eval.batching on a hand-worked case: a bigram "model" whose next-token probabilities are a table,
so every log-likelihood is a sum of logs of table entries, and every forward call is recorded."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.lm_eval.batching import TokenRequest, loglikelihoods, longest_first, pad_right

# P[a] = the next-token distribution after token a (rows sum to 1)
P = torch.tensor([[1 / 2, 1 / 4, 1 / 4],
                  [1 / 8, 3 / 4, 1 / 8],
                  [1 / 3, 1 / 3, 1 / 3]])
PAD = 2


class Bigram:
    """logits (B, T, V) = log P[ids]: the prediction at each position depends on that token only."""

    def __init__(self) -> None:
        self.calls: list[torch.Tensor] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.calls.append(ids.clone())
        return P.log()[ids]


def test_inputs_are_cut_from_the_left_to_the_window():
    req = TokenRequest((0, 1, 2, 0, 1), (1,))
    assert req.model_input(4) == [1, 2, 0, 1]  # (0 1 2 0 1 1)[-5:] without its last token
    assert req.model_input(10) == [0, 1, 2, 0, 1]
    assert TokenRequest((0,), (1, 1)).model_input(4) == [0, 1]
    with pytest.raises(ValueError, match="continuation of 3 tokens does not fit the model's window of 2"):
        TokenRequest((0,), (1, 1, 1)).model_input(2)
    with pytest.raises(ValueError, match="at least one context and one continuation token, got 0 and 1"):
        TokenRequest((), (1,))


def test_longest_first_ties_broken_by_ids_and_padded_on_the_right():
    reqs = [TokenRequest((2, 0), (0,)), TokenRequest((0,), (1, 1)), TokenRequest((0, 1, 2, 0, 1), (1,))]
    assert longest_first(reqs) == [2, 1, 0]  # 6 tokens, then (0 1 1) before (2 0 0)
    assert pad_right([[0, 1, 2], [1]], PAD).tolist() == [[0, 1, 2], [1, PAD, PAD]]


def test_hand_worked_scores_one_forward_per_batch_in_the_callers_order():
    reqs = [
        TokenRequest((0,), (1, 1)),  # log P[0,1] + log P[1,1]; after 0 the argmax is 0: not greedy
        TokenRequest((2, 0), (0,)),  # log P[0,0]; greedy
        TokenRequest((0, 1, 2, 0, 1), (1,)),  # cut to (1 2 0 1): log P[1,1]; greedy
    ]
    model = Bigram()
    got = loglikelihoods(model, reqs, max_length=4, batch_size=2, pad_id=PAD)
    expected = [(math.log(1 / 4) + math.log(3 / 4), False), (math.log(1 / 2), True), (math.log(3 / 4), True)]
    for (value, greedy), (want, want_greedy) in zip(got, expected, strict=True):
        assert value == pytest.approx(want, abs=1e-6) and greedy is want_greedy
    # two calls: the longest request with the next longest (right-padded), then the last one alone
    assert [c.tolist() for c in model.calls] == [[[1, 2, 0, 1], [0, 1, PAD, PAD]], [[2, 0]]]


def test_padding_does_not_change_a_score():
    reqs = [TokenRequest((0, 1, 2, 0, 1), (1,)), TokenRequest((1,), (0,))]
    together = loglikelihoods(Bigram(), reqs, max_length=8, batch_size=2, pad_id=PAD)
    alone = [loglikelihoods(Bigram(), [r], max_length=8, batch_size=1, pad_id=PAD)[0] for r in reqs]
    assert together == alone
