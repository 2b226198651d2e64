"""DistilBERT import/export parity against transformers' DistilBertForMaskedLM."""

from __future__ import annotations

import pytest
import torch
from transformers import DistilBertConfig, DistilBertForMaskedLM

import zoo
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved
from zoo.modules.positional import Sinusoidal

TINY = dict(dim=32, n_layers=2, n_heads=4, hidden_dim=48, vocab_size=99, max_position_embeddings=40)


def _assert_same_logits(hf, model, ids, mask):
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    # Bidirectional: pad queries still see every real key in both libraries, so all positions agree.
    assert got.shape == ref.shape and (got - ref).abs().max() < 1e-4


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_mlm_logits_match_with_padding(tmp_path, activation):
    hf = perturbed(DistilBertForMaskedLM(DistilBertConfig(**TINY, activation=activation)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.norm_eps, c.type_vocab_size, c.norm_placement, c.activation) == (1e-12, 0, "post", activation)
    _assert_same_logits(hf, model, *right_padded(3, 12, 99, [12, 8, 5]))


def test_sinusoidal_checkpoint_loads_its_stored_table(tmp_path):
    """sinusoidal_pos_embds fills the position table with zoo's interleaved sinusoid at init; transformers
    then reads the stored (here perturbed) table, and so does zoo."""
    fresh = DistilBertForMaskedLM(DistilBertConfig(**TINY, sinusoidal_pos_embds=True))
    table = fresh.distilbert.embeddings.position_embeddings.weight
    cfg = zoo.config.ModelConfig(d_model=32, n_heads=4,
                                 positional={"name": "sinusoidal", "layout": "interleaved"})
    assert torch.allclose(table, Sinusoidal(cfg).pattern(40)[0], atol=1e-6)
    hf = perturbed(fresh)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.positional.name == "learned"
    _assert_same_logits(hf, model, *right_padded(2, 10, 99, [10, 6]))


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path, tied):
    hf = perturbed(DistilBertForMaskedLM(DistilBertConfig(**TINY, tie_word_embeddings=tied)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    _, hf2 = export_round_trip(model, DistilBertForMaskedLM, tmp_path / "export")
    _assert_same_logits(hf2, model, *right_padded(2, 10, 99, [10, 6]))


def test_preset_exports_to_transformers(tmp_path):
    model = zoo.build("distilbert_base", d_model=32, n_layers=1, n_heads=4, d_ff=48, vocab_size=99,
                      max_seq_len=16)
    hf = DistilBertForMaskedLM.from_pretrained(zoo.save_pretrained(model.eval(), tmp_path / "p",
                                                                   model_type="distilbert"))
    _assert_same_logits(hf.eval(), model, *right_padded(2, 12, 99, [12, 3]))


def test_export_refuses_token_types():
    model = zoo.build("distilbert_base", d_model=32, n_layers=1, n_heads=4, d_ff=48, vocab_size=99,
                      max_seq_len=16, type_vocab_size=2)
    with pytest.raises(ValueError, match="type_vocab_size=2 \\(would load as 0\\)"):
        zoo.save_pretrained(model, "unused", model_type="distilbert")
