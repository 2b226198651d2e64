"""Encoder presets with published shapes: zoo's parameter count equals the transformers masked-LM model built
from the same values (on the meta device: no memory). Tied tensors count once on both sides."""

from __future__ import annotations

import pytest
import torch
from transformers import DistilBertConfig, DistilBertForMaskedLM, RobertaConfig, RobertaForMaskedLM

import zoo

HF_MODELS = {
    "roberta_base": lambda: RobertaForMaskedLM(RobertaConfig(
        vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
        layer_norm_eps=1e-5)),
    "distilbert_base": lambda: DistilBertForMaskedLM(DistilBertConfig(
        vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072, max_position_embeddings=512)),
}
# HF roberta-base / distilbert-base-uncased
PUBLISHED = {"roberta_base": 124_697_433, "distilbert_base": 66_985_530}


@pytest.mark.parametrize("name", sorted(HF_MODELS))
def test_preset_count_equals_transformers(name):
    with torch.device("meta"):
        hf = HF_MODELS[name]()
        model = zoo.build(name)
    assert model.num_parameters() == sum(p.numel() for p in hf.parameters()) == PUBLISHED[name]
