"""Speculative decoding: the output is the target's greedy output token for token (checked against the
textbook re-run-everything greedy loop), for several prompts and draft sizes; a draft that is the target
itself has every token accepted; bad drafts and settings raise one clear error."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.generation.conftest import naive_greedy

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
    spec = TARGET.generate(ids, max_new_tokens=16, eos_token_id=eos, return_dict=True, assistant_model=DRAFTS["small"])
    assert torch.equal(spec.sequences, plain.sequences)
    assert len(spec.logits) == len(plain.logits)
    for a, b in zip(spec.logits, plain.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_speculative_left_padded_single_prompt():
    ids, mask = torch.tensor([[0, 0, 5, 6, 7]]), torch.tensor([[0, 0, 1, 1, 1]])
    plain = TARGET.generate(ids, attention_mask=mask, max_new_tokens=6, eos_token_id=[])
    spec = TARGET.generate(ids, attention_mask=mask, max_new_tokens=6, eos_token_id=[], assistant_model=DRAFTS["small"])
    assert torch.equal(spec, plain)


@pytest.mark.parametrize(
    ("draft", "prompt", "kwargs", "message"),
    [
        (_decoder(16, 1, vocab=VOCAB + 1), [[5, 6]], {}, r"model.vocab_size=65 but the target has 64"),
        (DRAFTS["small"], [[5, 6], [7, 8]], {}, r"\(batch 1\); got 2 prompts"),
        (DRAFTS["small"], [[5, 6]], dict(do_sample=True), "drop do_sample"),
        (DRAFTS["small"], [[5, 6]], dict(num_beams=2), "drop num_beams"),
        (DRAFTS["small"], [[5, 6]], dict(compile=True), "drop compile"),
        (DRAFTS["small"], [[5, 6]], dict(max_new_tokens=50), r"exceeds the assistant_model's reach of 40 positions"),
        (DRAFTS["small"], [[5, 6]], dict(num_assistant_tokens=0), "num_assistant_tokens must be an integer >= 1"),
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
