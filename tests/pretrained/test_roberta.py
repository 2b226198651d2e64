"""RoBERTa / XLM-RoBERTa import/export parity against transformers' *ForMaskedLM and
*ForSequenceClassification."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import (
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    XLMRobertaConfig,
    XLMRobertaForMaskedLM,
)

import zoo
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved

PAD = 1
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, vocab_size=99,
            max_position_embeddings=40, type_vocab_size=2, layer_norm_eps=1e-5, pad_token_id=PAD)


def _batch(lengths: list[int], length: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids with pad_token_id at the pads, as a tokenizer gives them (RoBERTa's positions read
    it)."""
    ids, mask = right_padded(len(lengths), length, 99, lengths, seed=seed)
    return ids.masked_fill(mask == 0, PAD), mask


def _assert_same_logits(hf, model, ids, mask, **kwargs):
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, **kwargs).logits
        got = model(ids, attention_mask=mask, **kwargs).logits
    assert got.shape == ref.shape and (got - ref).abs().max() < 1e-4


def test_mlm_logits_match_on_every_position_right_and_left_padded(tmp_path):
    hf = perturbed(RobertaForMaskedLM(RobertaConfig(**TINY)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    positions = c.positional
    assert (positions.name, positions.offset, positions.skip_pads) == ("learned", PAD + 1, True)
    assert (c.max_seq_len, c.norm_eps) == (40 - PAD - 1, 1e-5)
    ids, mask = _batch([12, 8, 5])
    # Pads read row pad_id and real tokens count from pad_id + 1 in both, so every position (pads too) agrees.
    _assert_same_logits(hf, model, ids, mask, token_type_ids=torch.randint(0, 2, ids.shape))
    left = torch.stack([row.roll(int((m == 0).sum())) for row, m in zip(ids, mask, strict=True)])
    _assert_same_logits(hf, model, left, (left != PAD).long())  # left pads: positions still count real tokens


def test_classifier_logits_match_and_export_loads_in_transformers(tmp_path):
    hf = perturbed(RobertaForSequenceClassification(RobertaConfig(**TINY, num_labels=3)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == "classifier" and model.config.head.num_labels == 3
    ids, mask = _batch([9, 4], length=9, seed=2)
    _assert_same_logits(hf, model, ids, mask)
    hf2 = RobertaForSequenceClassification.from_pretrained(
        zoo.save_pretrained(model, tmp_path / "out")).eval()
    _assert_same_logits(hf2, model, ids, mask)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path, tied):
    hf = perturbed(RobertaForMaskedLM(RobertaConfig(**TINY, tie_word_embeddings=tied)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    _, hf2 = export_round_trip(model, RobertaForMaskedLM, tmp_path / "export")
    _assert_same_logits(hf2, model, *_batch([10, 6], length=10))


def test_xlm_roberta_with_another_activation_keeps_the_gelu_head(tmp_path):
    """RobertaLMHead applies gelu whatever hidden_act is; zoo sets model.head.activation for it."""
    hf = perturbed(XLMRobertaForMaskedLM(XLMRobertaConfig(**TINY, hidden_act="gelu_new")))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.activation, model.config.head.activation) == ("gelu_tanh", "gelu")
    ids, mask = _batch([12, 7])
    _assert_same_logits(hf, model, ids, mask)
    out = zoo.save_pretrained(model, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["model_type"] == "xlm-roberta"
    _assert_same_logits(XLMRobertaForMaskedLM.from_pretrained(out).eval(), model, ids, mask)


def test_preset_exports_to_transformers(tmp_path):
    model = zoo.build("roberta_base", d_model=32, n_layers=1, n_heads=4, d_ff=48, vocab_size=99,
                      max_seq_len=16).eval()
    hf = RobertaForMaskedLM.from_pretrained(zoo.save_pretrained(model, tmp_path / "preset",
                                                                model_type="roberta")).eval()
    _assert_same_logits(hf, model, *_batch([12, 3]))


@pytest.mark.parametrize(("change", "named"), [
    (dict(is_decoder=True), "is_decoder=True"),
    (dict(pad_token_id=None), "pad_token_id is a token id=False"),
    (dict(position_embedding_type="relative_key"), "position_embedding_type='relative_key'"),
])
def test_unsupported_settings_are_named(tmp_path, change, named):
    hf = json.loads(RobertaConfig(**TINY).to_json_string())
    (tmp_path / "config.json").write_text(json.dumps({**hf, **change}))
    with pytest.raises(ValueError, match="roberta config.json uses settings zoo does not support") as err:
        zoo.pretrained.load_config(tmp_path)
    assert named in str(err.value)


def test_export_refuses_positions_roberta_cannot_express():
    model = zoo.build("roberta_base", d_model=32, n_layers=1, n_heads=4, d_ff=48, vocab_size=99,
                      max_seq_len=16, positional={"skip_pads": False})
    with pytest.raises(ValueError, match=r"model.positional.skip_pads=False \(would load as True\)"):
        zoo.save_pretrained(model, "unused", model_type="roberta")
