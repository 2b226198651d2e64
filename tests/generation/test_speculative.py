"""Speculative decoding: greedy output is the target's greedy output token for token (checked against the
textbook re-run-everything greedy loop), for several prompts and draft sizes; sampled tokens are distributed
as the target's own samples (the rejection step against a closed-form distribution, and the whole loop against
the target's exact joint distribution of two tokens); a draft that is the target itself has every token
accepted; bad drafts and settings raise one clear error."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.generation.conftest import naive_greedy
from zoo.generation.logits import build_processors, process
from zoo.generation.speculative import Choice, _verify

VOCAB = 64


def _decoder(d_model: int, n_layers: int, positional: str = "rope", vocab: int = VOCAB, seed: int = 0):
    torch.manual_seed(seed)
    return zoo.build(dict(arch="decoder", vocab_size=vocab, d_model=d_model, n_layers=n_layers, n_heads=4,
                          positional=positional, max_seq_len=40, dropout=0.0)).eval()


TARGET = _decoder(32, 3)
DRAFTS = {"small": _decoder(16, 1, positional="learned", seed=1), "target": TARGET}


@pytest.mark.parametrize("prompt", [[5, 6, 7], [1, 2, 3, 4, 5, 9, 12], [33]])
@pytest.mark.parametrize("draft", list(DRAFTS))
@pytest.mark.parametrize("k", [1, 4])
def test_speculative_equals_target_greedy(prompt, draft, k):
    out = TARGET.generate([prompt], max_new_tokens=16, eos_token_id=[], assistant_model=DRAFTS[draft],
                          num_assistant_tokens=k, return_dict=True)
    assert out.sequences[0].tolist() == naive_greedy(TARGET, prompt, 16)
    assert len(out.logits) == 16
    if draft == "target":
        assert out.acceptance_rate == 1.0
    else:
        assert 0.0 <= out.acceptance_rate <= 1.0


def test_speculative_logits_and_eos_match_plain_greedy():
    """The logits reported per new token are the target's, and an EOS ends the output at the same place."""
    ids = torch.tensor([[5, 6, 7]])
    plain = TARGET.generate(ids, max_new_tokens=16, return_dict=True)
    eos = int(plain.sequences[0, 8])  # a token greedy emits mid-way: stop there
    plain = TARGET.generate(ids, max_new_tokens=16, eos_token_id=eos, return_dict=True)
    spec = TARGET.generate(ids, max_new_tokens=16, eos_token_id=eos, return_dict=True,
                           assistant_model=DRAFTS["small"])
    assert torch.equal(spec.sequences, plain.sequences)
    assert len(spec.logits) == len(plain.logits)
    for a, b in zip(spec.logits, plain.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_speculative_left_padded_single_prompt():
    ids, mask = torch.tensor([[0, 0, 5, 6, 7]]), torch.tensor([[0, 0, 1, 1, 1]])
    plain = TARGET.generate(ids, attention_mask=mask, max_new_tokens=6, eos_token_id=[])
    spec = TARGET.generate(ids, attention_mask=mask, max_new_tokens=6, eos_token_id=[],
                           assistant_model=DRAFTS["small"])
    assert torch.equal(spec, plain)


@pytest.mark.parametrize(
    ("draft", "prompt", "kwargs", "message"),
    [
        (_decoder(16, 1, vocab=VOCAB + 1), [[5, 6]], {}, r"model.vocab_size=65 but the target has 64"),
        (DRAFTS["small"], [[5, 6], [7, 8]], {}, r"\(batch 1\); got 2 prompts"),
        (DRAFTS["small"], [[5, 6]], dict(do_sample=True, num_return_sequences=2),
         "drop num_return_sequences"),
        (DRAFTS["small"], [[5, 6]], dict(num_beams=2), "drop num_beams"),
        (DRAFTS["small"], [[5, 6]], dict(compile=True), "drop compile"),
        (DRAFTS["small"], [[5, 6]], dict(max_new_tokens=50),
         r"exceeds the assistant_model's reach of 40 positions"),
        (DRAFTS["small"], [[5, 6]], dict(num_assistant_tokens=0),
         "num_assistant_tokens must be an integer >= 1"),
    ],
)
def test_speculative_bad_input_raises_one_clear_error(draft, prompt, kwargs, message):
    with pytest.raises(ValueError, match=message):
        TARGET.generate(prompt, assistant_model=draft, **kwargs)


def test_speculative_rejects_encoder_decoder():
    torch.manual_seed(0)
    seq2seq = zoo.build(dict(arch="encoder_decoder", vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2,
                             dropout=0.0)).eval()
    with pytest.raises(ValueError, match="needs decoder-only models"):
        seq2seq.generate([[5, 6]], assistant_model=seq2seq)


def _tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


@pytest.mark.e2e
@pytest.mark.parametrize("k", [1, 2])
def test_rejection_step_emits_the_target_distribution(k):
    """Draft tokens drawn from q, kept with probability min(1, p/q), else a draw from max(0, p - q): the first
    emitted token is distributed as p (closed form), however far q is from p."""
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0]])
    q = torch.tensor([[0.1, 0.1, 0.2, 0.3, 0.3]])
    logits = p.clamp_min(1e-30).log().expand(k + 1, -1)[None]  # (1, k + 1, V); softmax gives back p
    choice = Choice(True, [], torch.Generator().manual_seed(0))
    n_draws, counts = 4_000, torch.zeros(5)
    for _ in range(n_draws):
        drafted = torch.cat([choice.draw(q) for _ in range(k)], dim=1)  # (1, k)
        n, own = _verify(logits, drafted, [q] * k, choice)
        counts[int(drafted[0, 0]) if n else int(own)] += 1
    empirical = counts / n_draws
    assert torch.allclose(empirical, p[0], atol=0.03), empirical  # binomial sd <= 0.008
    # q itself would fail
    assert _tv(dict(enumerate(empirical.tolist())), dict(enumerate(q[0].tolist()))) > 0.5


@pytest.mark.e2e
def test_speculative_sampling_matches_the_target_joint_distribution():
    """Two sampled tokens through the whole loop (draft, verify, cache crops) against the target's exact joint
    distribution after temperature and top-k; the draft's own joint is far from it, so the check can fail."""
    vocab, prompt = 4, [3, 1, 2]

    def sharp(seed: int, d: int, layers: int):
        torch.manual_seed(seed)
        return zoo.build(dict(arch="decoder", vocab_size=vocab, d_model=d, n_layers=layers, n_heads=2,
                              max_seq_len=8, dropout=0.0, init_std=0.5)).eval()

    target, draft = sharp(0, 16, 2), sharp(3, 8, 1)
    processors = build_processors(0.8, 3, None)

    def joint(model) -> dict:
        def probs(seq: list[int]) -> torch.Tensor:  # (V,): the sampling distribution after seq
            with torch.no_grad():
                return process(model(torch.tensor([seq])).logits[:, -1].float(), processors).softmax(-1)[0]

        first = probs(prompt)
        return {(a, b): float(first[a] * pb) for a in range(vocab)
                for b, pb in enumerate(probs([*prompt, a]))}

    exact = joint(target)
    n_draws, counts = 800, {}
    for seed in range(n_draws):
        out = target.generate([prompt], max_new_tokens=2, eos_token_id=[], do_sample=True, temperature=0.8,
                              top_k=3, seed=seed, assistant_model=draft, num_assistant_tokens=2)
        key = tuple(out[0, len(prompt):].tolist())
        counts[key] = counts.get(key, 0) + 1 / n_draws
    assert _tv(joint(draft), exact) > 0.4
    assert _tv(counts, exact) < 0.08  # 16 outcomes, 800 draws: expected TV ~0.03


def test_speculative_sampling_with_the_target_as_draft_accepts_everything_and_is_seeded():
    kwargs = dict(max_new_tokens=12, eos_token_id=[], do_sample=True, top_p=0.9, seed=7,
                  assistant_model=TARGET, return_dict=True)
    first, again = TARGET.generate([[5, 6, 7]], **kwargs), TARGET.generate([[5, 6, 7]], **kwargs)
    assert first.acceptance_rate == 1.0  # p == q: every ratio is 1
    assert torch.equal(first.sequences, again.sequences)
