"""BART and Marian import/export parity against transformers' BartForConditionalGeneration and
MarianMTModel built from tiny random configs."""

from __future__ import annotations

import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

import zoo
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved
from zoo.modules.positional import Sinusoidal

TINY = dict(d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, vocab_size=99,
            max_position_embeddings=40)


def tiny_bart(**kw):
    return perturbed(BartForConditionalGeneration(BartConfig(**{**TINY, **kw})))


def tiny_marian(**kw):
    cfg = dict(TINY, pad_token_id=98, eos_token_id=0, decoder_start_token_id=98, bos_token_id=None,
               activation_function="swish", scale_embedding=True)
    return perturbed(MarianMTModel(MarianConfig(**{**cfg, **kw})))


def compare(hf, model, seed=0):
    """Logits of a right-padded source batch and a right-padded target batch; pads masked on both sides."""
    src, src_mask = right_padded(3, 11, 99, [11, 7, 3], seed=seed)
    tgt, tgt_mask = right_padded(3, 8, 99, [8, 5, 6], seed=seed + 1)
    with torch.no_grad():
        ref = hf(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt,
                 decoder_attention_mask=tgt_mask).logits
        got = model(src, tgt, src_mask, decoder_attention_mask=tgt_mask).logits
    real = tgt_mask.bool()  # causal + right padding: every real target position sees the same keys
    return (got[real] - ref[real]).abs().max().item()


@pytest.mark.parametrize("scale", [False, True])
def test_bart_logits_match_with_padding(tmp_path, scale):
    hf = tiny_bart(scale_embedding=scale)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.positional.to_data() == {"name": "learned", "offset": 2, "skip_pads": False}
    assert model.config.embed_norm and model.config.embed_scale == scale
    assert compare(hf, model) < 1e-4


def test_marian_logits_match_with_padding(tmp_path):
    hf = tiny_marian()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.activation == "silu"
    assert model.config.positional.to_data() == {"name": "sinusoidal", "layout": "half"}
    assert model.config.start_id == 98 and model.config.eos_id == 0
    assert compare(hf, model, seed=4) < 1e-4


def test_marian_unshared_embeddings(tmp_path):
    hf = tiny_marian(share_encoder_decoder_embeddings=False)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert not model.config.share_embeddings
    assert not torch.equal(model.src_embed.tokens.weight, model.tgt_embed.tokens.weight)
    assert compare(hf, model, seed=6) < 1e-4


def test_half_sinusoid_equals_marian_table():
    """zoo's `positional: {name: sinusoidal, layout: half}` against the table transformers builds (float64
    numpy, cast)."""
    table = MarianSinusoidalPositionalEmbedding(512, 64)
    table.weight.data = table.create_weight()
    cfg = zoo.ModelConfig(d_model=64, positional={"name": "sinusoidal", "layout": "half"})
    ours = Sinusoidal(cfg).encoding(torch.arange(512)[None])[0]
    assert (ours - table.weight).abs().max() < 1e-4  # fp32 angle rounding at position ~500


@pytest.mark.parametrize("make,cls",
                         [(tiny_bart, BartForConditionalGeneration), (tiny_marian, MarianMTModel)])
def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path, make, cls):
    model = zoo.from_pretrained(saved(make(), tmp_path))
    _, hf = export_round_trip(model, cls, tmp_path / "export")
    assert compare(hf, model, seed=8) < 1e-4


def test_transformer_base_preset_exports_as_marian_when_half_sinusoid(tmp_path):
    model = zoo.build("transformer_base", vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1,
                      n_heads=4, d_ff=48, positional={"layout": "half"}, activation="relu",
                      dropout=0.0).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh")  # no family named: found by the knobs
    hf = MarianMTModel.from_pretrained(out).eval()
    src, tgt = torch.randint(3, 64, (2, 7)), torch.randint(3, 64, (2, 5))
    with torch.no_grad():
        diff = (hf(input_ids=src, decoder_input_ids=tgt).logits - model(src, tgt).logits).abs().max()
    assert diff < 1e-4


@pytest.mark.parametrize("make", [tiny_bart, tiny_marian], ids=["bart", "marian"])
def test_untied_token_tables_are_read_from_the_encoder_and_decoder(make, tmp_path):
    """transformers 5 unties encoder/decoder embed_tokens from `shared` when tie_word_embeddings=false; the
    forward pass reads those tables, so zoo must too (and refuse when they differ from each other)."""
    hf = make(tie_word_embeddings=False)
    assert hf.model.encoder.embed_tokens.weight is not hf.model.shared.weight  # the case under test exists
    with pytest.raises(ValueError,
                       match="encoder.embed_tokens and decoder.embed_tokens hold different weights"):
        zoo.from_pretrained(saved(hf, tmp_path, "different"))
    with torch.no_grad():
        # equal, but not `shared`
        hf.model.decoder.embed_tokens.weight.copy_(hf.model.encoder.embed_tokens.weight)
    assert not torch.equal(hf.model.shared.weight, hf.model.encoder.embed_tokens.weight)
    assert compare(hf, zoo.from_pretrained(saved(hf, tmp_path, "equal"))) < 1e-4
