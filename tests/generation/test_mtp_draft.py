"""Self-speculation with model.mtp (`generate(..., assistant_model="mtp")`, zoo.generation.mtp_draft): greedy
output is the plain greedy output token for token with drafts both kept and rejected (depth 1 and 2;
attention, latent attention and a recurrent gated_deltanet stack, trained 20 steps on arithmetic sequences
so the modules guess well but not always); every draft equals what a cache-free `output_mtp=True` forward
over the sequence + the earlier drafts predicts (the modules' caches follow the accepted prefix); sampled
tokens follow the model's exact joint distribution; what cannot apply is one error naming it."""

from __future__ import annotations

import functools

import pytest
import torch

import zoo
from tests.generation.conftest import naive_greedy
from zoo.generation import mtp_draft
from zoo.generation.logits import build_processors, process

VOCAB = 8
MLA = {"name": "mla", "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4}
GDN = {"name": "gated_deltanet", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
       "linear_key_head_dim": 8, "linear_value_head_dim": 6, "chunk_size": 4}
MIXERS = {"attention": {}, "mla": {"mixer": MLA},
          "gated_deltanet": {"mixer": GDN, "positional": "none"}}  # recurrent: rolled back by kept states


def _model(depth: int, seed: int = 0, vocab: int = VOCAB, **over):
    """A tiny decoder with random weights."""
    torch.manual_seed(seed)
    cfg = dict(arch="decoder", vocab_size=vocab, d_model=16, n_layers=1, n_heads=2, norm="rmsnorm",
               positional="rope", activation="swiglu", bias=False, max_seq_len=64,
               mtp={"name": "sequential", "depth": depth, "weight": 1.0})
    return zoo.build({**cfg, **over}).eval()


@functools.cache
def _trained(depth: int, mixer: str = "attention"):
    """_model trained 20 Adam steps on rows (a + s t) mod VOCAB (s in 1, 2): the main head and the modules
    learn the progression, so drafts are mostly kept; a prompt off it gets some rejected."""
    model = _model(depth, **MIXERS[mixer]).train()
    opt, gen = torch.optim.Adam(model.parameters(), 3e-2), torch.Generator().manual_seed(0)
    for _ in range(20):
        start = torch.randint(0, VOCAB, (8, 1), generator=gen)
        step = torch.randint(1, 3, (8, 1), generator=gen)
        ids = (start + step * torch.arange(12)) % VOCAB  # (8, 12)
        loss = model(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.mark.parametrize("mixer", list(MIXERS))
@pytest.mark.parametrize("depth", [1, 2])
def test_greedy_equals_plain_greedy_with_drafts_kept_and_rejected(depth, mixer):
    model = _trained(depth, mixer)
    rates = []
    for prompt in ([3, 5, 1], [2], [4, 4, 0, 1, 2, 5]):
        out = model.generate([prompt], max_new_tokens=24, eos_token_id=[], assistant_model="mtp",
                             return_dict=True)
        assert out.sequences[0].tolist() == naive_greedy(model, prompt, 24)
        plain = model.generate([prompt], max_new_tokens=24, eos_token_id=[], return_dict=True)
        torch.testing.assert_close(torch.stack(out.logits), torch.stack(plain.logits), rtol=1e-4, atol=1e-4)
        rates.append(out.acceptance_rate)
    assert 0.0 < sum(rates) / len(rates) < 1.0, rates  # drafts were kept and drafts were rejected


def test_eos_stops_the_run_where_plain_greedy_stops():
    model = _trained(2)
    plain = naive_greedy(model, [3, 5, 1], 12)
    eos = plain[6]  # a token the model emits: the run ends at its first appearance among the new tokens
    want = plain[: plain.index(eos, 3) + 1]
    got = model.generate([[3, 5, 1]], max_new_tokens=12, eos_token_id=eos, assistant_model="mtp")
    assert got[0].tolist() == want


@pytest.mark.parametrize("mixer", list(MIXERS))
@pytest.mark.parametrize("depth", [3])
def test_each_draft_is_what_a_cache_free_forward_predicts(depth, mixer, monkeypatch):
    """The modules' caches are cropped to the emitted tokens each round: a stale or misplaced entry would make
    a draft differ from the cache-free forward over sequence + earlier drafts (module j at the last position
    reads the draft j - 1 places on)."""
    model = _trained(depth, mixer)
    calls, propose = [], mtp_draft.MTPDrafter.propose

    def spy(self, hidden, seq, k, choice):
        drafted, qs = propose(self, hidden, seq, k, choice)
        calls.append((seq.clone(), drafted.clone()))
        return drafted, qs

    monkeypatch.setattr(mtp_draft.MTPDrafter, "propose", spy)
    rates = [model.generate([prompt], max_new_tokens=30, eos_token_id=[], assistant_model="mtp",
                            return_dict=True).acceptance_rate for prompt in ([4, 4, 0, 1, 2, 5], [0, 5, 2])]
    assert 0.0 < sum(rates) / 2 < 1.0, rates
    assert len(calls) > 10
    with torch.no_grad():
        for seq, drafted in calls:
            full = torch.cat([seq, drafted[:, :-1]], dim=1)  # the sequence + every draft a module reads
            states = model(full, output_mtp=True).mtp_hidden_states
            last = seq.shape[1] - 2  # the last position with a target hidden state
            want = [int(model.head(states[j][:, last]).argmax(-1)) for j in range(drafted.shape[1])]
            assert drafted[0].tolist() == want


@pytest.mark.e2e
def test_sampling_matches_the_model_joint_distribution():
    """Three sampled tokens (the second round drafts with the module) against the model's exact joint
    distribution after temperature and top-k; drafts are both kept and rejected."""
    vocab, prompt = 3, [2, 0, 1]
    model = _model(1, vocab=vocab, seed=2)
    processors = build_processors(0.8, 2, None)

    def probs(seq: list[int]) -> torch.Tensor:  # (V,): the sampling distribution after seq
        with torch.no_grad():
            return process(model(torch.tensor([seq])).logits[:, -1].float(), processors).softmax(-1)[0]

    exact = {}
    for a, pa in enumerate(probs(prompt)):
        for b, pb in enumerate(probs([*prompt, a])):
            for c, pc in enumerate(probs([*prompt, a, b])):
                exact[(a, b, c)] = float(pa * pb * pc)
    n_draws, counts, rates = 1500, {}, []
    for seed in range(n_draws):
        out = model.generate([prompt], max_new_tokens=3, eos_token_id=[], do_sample=True, temperature=0.8,
                             top_k=2, seed=seed, assistant_model="mtp", return_dict=True)
        key = tuple(out.sequences[0, len(prompt):].tolist())
        counts[key] = counts.get(key, 0) + 1 / n_draws
        rates.append(out.acceptance_rate)
    assert 0.0 < sum(rates) / n_draws < 1.0
    tv = 0.5 * sum(abs(counts.get(k, 0.0) - p) for k, p in exact.items())
    assert tv < 0.06, tv  # 27 outcomes (top-2: at most 8 likely), 1500 draws: expected TV ~0.02


@pytest.mark.parametrize(("build", "kwargs", "message"), [
    ({"mtp": None}, {}, "assistant_model='mtp' drafts with the model's own multi-token-prediction modules"),
    ({}, {"num_beams": 2}, "drop num_beams"),
    ({}, {"assistant_model": "eagle"}, "assistant_model='eagle': a draft is a decoder model"),
    ({}, {"input_ids": [[1, 2], [3, 4]]}, "one prompt at a time (batch 1); got 2 prompts"),
    ({}, {"max_new_tokens": 70}, "exceeds the target's reach of 64 positions"),
], ids=["no-mtp", "beams", "unknown", "batch", "reach"])
def test_what_cannot_apply_is_one_error(build, kwargs, message):
    torch.manual_seed(0)
    cfg = dict(arch="decoder", vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2, max_seq_len=64,
               mtp={"name": "sequential", "depth": 1, "weight": 0.3})
    model = zoo.build({**cfg, **build})
    call = {"input_ids": [[1, 2]], "assistant_model": "mtp", **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model.generate(call.pop("input_ids"), **call)
