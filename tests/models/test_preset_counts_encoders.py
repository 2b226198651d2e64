"""Encoder presets with published shapes: zoo's parameter count equals the transformers masked-LM model built
from the same values (on the meta device: no memory). Tied tensors count once on both sides."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    DistilBertConfig,
    DistilBertForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    ModernBertModel,
    RobertaConfig,
    RobertaForMaskedLM,
)

import zoo

# answerdotai/ModernBERT-base / -large config.json values (22 / 28 layers, global every 3rd from layer 0)
_MODERNBERT = dict(vocab_size=50368, global_attn_every_n_layers=3, local_attention=128,
                   max_position_embeddings=8192, global_rope_theta=160000.0, local_rope_theta=10000.0,
                   norm_eps=1e-5, norm_bias=False,
                   attention_bias=False, mlp_bias=False, classifier_bias=False, decoder_bias=True,
                   hidden_activation="gelu", classifier_activation="gelu", tie_word_embeddings=True,
                   pad_token_id=50283, bos_token_id=50281, eos_token_id=50282)
MODERNBERT = {
    "modernbert_base": dict(_MODERNBERT, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                            num_attention_heads=12),
    "modernbert_large": dict(_MODERNBERT, hidden_size=1024, intermediate_size=2624, num_hidden_layers=28,
                             num_attention_heads=16),
}
HF_MODELS = {
    "roberta_base": lambda: RobertaForMaskedLM(RobertaConfig(
        vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
        layer_norm_eps=1e-5)),
    "distilbert_base": lambda: DistilBertForMaskedLM(DistilBertConfig(
        vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072, max_position_embeddings=512)),
    "modernbert_base": lambda: ModernBertForMaskedLM(ModernBertConfig(**MODERNBERT["modernbert_base"])),
    "modernbert_large": lambda: ModernBertForMaskedLM(ModernBertConfig(**MODERNBERT["modernbert_large"])),
}
# HF roberta-base / distilbert-base-uncased; ModernBERT with its masked-LM head (the paper: "149M", "395M")
PUBLISHED = {"roberta_base": 124_697_433, "distilbert_base": 66_985_530, "modernbert_base": 149_655_232,
             "modernbert_large": 395_881_664}


@pytest.mark.parametrize("name", sorted(HF_MODELS))
def test_preset_count_equals_transformers(name):
    with torch.device("meta"):
        hf = HF_MODELS[name]()
        model = zoo.build(name)
    assert model.num_parameters() == sum(p.numel() for p in hf.parameters()) == PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(MODERNBERT))
def test_modernbert_bare_model_count_and_layer_kinds(name):
    """The bare ModernBertModel (what sentence-transformers embedders keep) counts as zoo's head=none, and
    zoo's local layers are transformers' sliding_attention ones."""
    with torch.device("meta"):
        hf = ModernBertModel(ModernBertConfig(**MODERNBERT[name]))
        model = zoo.build(name, head="none")
    assert model.num_parameters() == sum(p.numel() for p in hf.parameters())
    c = model.config
    assert [c.layer_is_local(i) for i in range(c.n_layers)] == [
        t == "sliding_attention" for t in hf.config.layer_types]
