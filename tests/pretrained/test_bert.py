"""BERT import/export parity against transformers' BertForMaskedLM / BertForSequenceClassification."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

import zoo
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, vocab_size=99,
            max_position_embeddings=40, type_vocab_size=3)


def test_mlm_logits_match_with_padding_and_token_types(tmp_path):
    hf = perturbed(BertForMaskedLM(BertConfig(**TINY)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.norm_eps == 1e-12 and model.config.embed_norm
            and model.config.norm_placement == "post")
    ids, mask = right_padded(3, 12, 99, [12, 8, 5])
    types = torch.randint(0, 3, ids.shape)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        got = model(ids, attention_mask=mask, token_type_ids=types).logits
    # Bidirectional: pad queries still see every real key in both libraries, so all positions agree.
    assert (got - ref).abs().max() < 1e-4


def test_untied_mlm_head_uses_the_decoder_weight_and_bias(tmp_path):
    """transformers 5 unties decoder.weight and decoder.bias (the ones the forward pass uses) from the word
    embeddings and cls.predictions.bias when tie_word_embeddings=false."""
    hf = perturbed(BertForMaskedLM(BertConfig(**TINY, tie_word_embeddings=False)))
    head = hf.cls.predictions
    # the case exists
    assert head.decoder.bias is not head.bias and not torch.equal(head.decoder.bias, head.bias)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert not model.config.tie_embeddings
    ids, mask = right_padded(2, 9, 99, [9, 6])
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    assert (got - ref).abs().max() < 1e-4


def test_classifier_logits_match(tmp_path):
    hf = perturbed(BertForSequenceClassification(BertConfig(**TINY, num_labels=3)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == "classifier" and model.config.head.num_labels == 3
    ids, mask = right_padded(2, 9, 99, [9, 4], seed=2)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    assert got.shape == (2, 3) and (got - ref).abs().max() < 1e-4
    hf2 = BertForSequenceClassification.from_pretrained(zoo.save_pretrained(model, tmp_path / "out")).eval()
    with torch.no_grad():
        assert (hf2(input_ids=ids, attention_mask=mask).logits - got).abs().max() < 1e-4


def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path):
    hf = perturbed(BertForMaskedLM(BertConfig(**TINY)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    _, hf2 = export_round_trip(model, BertForMaskedLM, tmp_path / "export")
    ids = torch.randint(0, 99, (2, 10))
    with torch.no_grad():
        assert (hf2(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4


def test_pretraining_checkpoint_warns_about_unused_pooler(tmp_path):
    from transformers import BertForPreTraining

    hf = perturbed(BertForPreTraining(BertConfig(**TINY)))
    with pytest.warns(UserWarning, match="pooler"):
        model = zoo.from_pretrained(saved(hf, tmp_path))
    ids = torch.randint(0, 99, (2, 7))
    with torch.no_grad():
        assert (model(ids).logits - hf(input_ids=ids).prediction_logits).abs().max() < 1e-4
