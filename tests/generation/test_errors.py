"""Bad input gives a ValueError that names the option and what is allowed."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.generation.conftest import VOCAB, tiny_decoder

OK = torch.tensor([[3, 4, 5]])


@pytest.mark.parametrize(
    "ids, kwargs, match",
    [
        (torch.zeros(1, 0, dtype=torch.long), {}, "empty"),
        ([], {}, "empty"),
        ([[3, 4], []], {}, "Prompt 1 is empty"),
        (torch.tensor([[3, VOCAB]]), {}, r"\[3, 50\] but the vocabulary is \[0, 50\)"),
        (torch.tensor([[-1, 4]]), {}, "vocabulary"),
        (torch.tensor([[3.0, 4.0]]), {}, "integer token ids"),
        (OK, dict(attention_mask=torch.tensor([[0, 0, 0]])), "no real tokens"),
        (OK, dict(attention_mask=torch.tensor([[1, 1]])), "attention_mask shape"),
        (OK, dict(max_new_tokens=-1), "max_new_tokens must be an integer >= 0"),
        (OK, dict(max_new_tokens=2.5), "max_new_tokens"),
        (OK, dict(num_beams=0), "num_beams must be an integer >= 1"),
        (OK, dict(do_sample=True, top_p=0.0), r"top_p must be in \(0, 1\]"),
        (OK, dict(do_sample=True, top_p=1.5), "top_p"),
        (OK, dict(do_sample=True, temperature=-0.5), "temperature must be a number >= 0"),
        (OK, dict(do_sample=True, top_k=-2), "top_k"),
        (OK, dict(temperature=0.7), "pass do_sample=True"),
        (OK, dict(num_beams=2, num_return_sequences=3), "exceeds num_beams"),
        (OK, dict(num_return_sequences=2), "greedy"),
        (OK, dict(num_beams=2, do_sample=True), "beam sampling"),
        (OK, dict(eos_token_id=VOCAB), "eos_token_id"),
        (OK, dict(num_beams=2, length_penalty=float("nan")), "length_penalty must be a finite number"),
        (OK, dict(max_new_token=3), "Did you mean 'max_new_tokens'"),
    ],
)
def test_bad_input_raises_clear_value_error(ids, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_decoder().generate(ids, **kwargs)


def test_encoder_only_model_cannot_generate():
    model = zoo.build(dict(arch="encoder", vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match="decoder or encoder_decoder"):
        model.generate(OK)


def test_zero_new_tokens_returns_prompt_and_training_mode_is_restored():
    model = tiny_decoder().train()
    assert torch.equal(model.generate(OK, max_new_tokens=0), OK)
    assert torch.equal(model.generate(OK, max_new_tokens=0, num_beams=2), OK)
    assert model.training


@pytest.mark.parametrize("key", ["do_sample", "use_cache", "early_stopping", "return_dict"])
@pytest.mark.parametrize("value", ["no", "yes", 1])
def test_true_false_options_reject_strings_and_numbers(key, value):
    with pytest.raises(ValueError, match=rf"{key} must be True or False, got {value!r}"):
        tiny_decoder().generate(OK, **{key: value})
