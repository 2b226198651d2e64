"""Test 3: a stub model with a hand-made next-token probability tree. Greedy takes the locally best
first token; 2-beam search finds the sequence with the higher total log-probability, and its n-best
scores equal the hand computation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from zoo import ModelConfig, ModelOutput
from zoo.generation import generate
from zoo.modules.positional import Positional

PAD, BOS, EOS, A, B, C, D, E, EOS2 = range(9)
TREE = {  # prefix after BOS -> next-token probabilities
    (): {A: 0.5, B: 0.4, EOS: 0.1},
    (A,): {C: 0.4, D: 0.3, E: 0.3},
    (B,): {C: 0.9, D: 0.1},
    (A, C): {EOS: 1.0}, (A, D): {EOS: 1.0}, (A, E): {EOS: 1.0},
    (B, C): {EOS: 1.0}, (B, D): {EOS: 1.0},
}
TREE2 = {  # two stop tokens: hypotheses end at different steps
    (): {EOS: 0.35, EOS2: 0.1, A: 0.3, B: 0.25},
    (A,): {C: 0.9, EOS: 0.1},
    (B,): {EOS: 1.0},
    (A, C): {EOS: 1.0},
}


class TreeLM(nn.Module):
    """Next-token distribution looked up from the tokens after BOS; prefixes outside the tree emit EOS."""

    is_encoder_decoder = False

    def __init__(self, tree) -> None:
        super().__init__()
        self.config = ModelConfig(arch="decoder", vocab_size=9, d_model=4, n_layers=0, n_heads=1,
                                  positional="none", norm="none")
        self.tree = tree
        self.positions = Positional(self.config)  # no positions: the stepper's window is unbounded
        self.anchor = nn.Parameter(torch.zeros(()))  # gives generate a device

    def new_cache(self):
        raise AssertionError("the tree tests decode without a cache")

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None,
                logits_to_keep=0) -> ModelOutput:
        rows = []
        for row in input_ids.tolist():
            probs = torch.zeros(9)
            prefix = tuple(t for t in row[1:] if t != PAD)
            for token, p in self.tree.get(prefix, {EOS: 1.0}).items():
                probs[token] = p
            rows.append(probs.log())
        return ModelOutput(logits=torch.stack(rows)[:, None].expand(-1, input_ids.shape[1], -1))


def run(model, **kw):
    options = dict(max_new_tokens=5, use_cache=False, eos_token_id=EOS) | kw
    return generate(model, torch.tensor([[BOS]]), **options)


def test_greedy_takes_locally_best_path():
    assert run(TreeLM(TREE))[0].tolist() == [BOS, A, C, EOS]  # total p = 0.5 * 0.4 = 0.20


@pytest.mark.parametrize("length_penalty", [1.0, 0.0, 2.0])
@pytest.mark.parametrize("early_stopping", [True, False])
def test_two_beams_find_higher_total_probability(length_penalty, early_stopping):
    out = run(TreeLM(TREE), num_beams=2, num_return_sequences=2, length_penalty=length_penalty,
              early_stopping=early_stopping, return_dict=True)
    assert out.sequences.tolist() == [[BOS, B, C, EOS], [BOS, A, C, EOS]]  # 0.36 beats greedy's 0.20
    norm = 3**length_penalty  # three generated tokens, EOS included
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.36), math.log(0.20)]) / norm)


def test_per_hypothesis_eos_and_n_best():
    """Step 1: EOS (0.35) is in the top 2 and ends a hypothesis while A, B keep running; EOS2 (0.1) is not
    in the top 2 so it never ends one. With length_penalty=1: [A C EOS] = log(.27)/3 = -0.436 beats
    [EOS] = log(.35)/1 = -1.050 and [B EOS] = log(.25)/2 = -0.693."""
    out = run(TreeLM(TREE2), num_beams=2, num_return_sequences=2, eos_token_id=[EOS, EOS2],
              length_penalty=1.0, return_dict=True)
    assert out.sequences.tolist() == [[BOS, A, C, EOS], [BOS, B, EOS, PAD]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.3 * 0.9) / 3, math.log(0.25) / 2]))
    out = run(TreeLM(TREE2), num_beams=2, num_return_sequences=2, eos_token_id=[EOS, EOS2],
              length_penalty=0.0, return_dict=True)  # raw sums: [EOS] = log .35 beats [A C EOS] = log .27
    assert out.sequences.tolist() == [[BOS, EOS, PAD, PAD], [BOS, A, C, EOS]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.35), math.log(0.27)]))


def test_early_stopping_true_stops_at_first_full_pool():
    """length_penalty=0: after step 2 the pool holds [EOS] (log .35) and [B EOS] (log .25). True stops
    there; False goes on because the live [A C] (log .27) still beats the pool's worst."""
    out = run(TREE2_MODEL, num_beams=2, num_return_sequences=2, eos_token_id=[EOS, EOS2], length_penalty=0.0,
              early_stopping=True, return_dict=True)
    assert out.sequences.tolist() == [[BOS, EOS, PAD], [BOS, B, EOS]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.35), math.log(0.25)]))


def test_budget_end_returns_live_beams_with_their_scores():
    out = run(TreeLM(TREE), max_new_tokens=2, num_beams=2, num_return_sequences=2, return_dict=True)
    assert out.sequences.tolist() == [[BOS, B, C], [BOS, A, C]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.36) / 2, math.log(0.20) / 2]))


TREE2_MODEL = TreeLM(TREE2)
