"""Causality, permutation equivariance and padding invariance: properties a correct model must have."""

import pytest
import torch

import zoo

from .tiny import POSITIONED, SCHEMES, tiny


@pytest.mark.parametrize("positional", SCHEMES)
def test_decoder_future_tokens_never_change_earlier_logits(positional):
    model = tiny("gpt_nano", positional=positional).eval()
    ids = torch.randint(5, 97, (2, 12))
    changed = ids.clone()
    changed[:, 7:] = torch.randint(5, 97, (2, 5))
    a, b = model(ids).logits, model(changed).logits
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:], atol=1e-3)


@pytest.mark.parametrize("positional", POSITIONED)
def test_encoder_decoder_decoder_side_is_causal(positional):
    model = tiny("transformer_tiny", positional=positional, dropout=0.0).eval()
    src = torch.randint(5, 97, (2, 9))
    tgt = torch.randint(5, 97, (2, 8))
    changed = tgt.clone()
    changed[:, 5:] = torch.randint(5, 97, (2, 3))
    a, b = model(src, tgt).logits, model(src, changed).logits
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:], atol=1e-3)
    # ...while every decoder position sees the whole source (cross-attention to the encoder's top layer)
    other_src = src.clone()
    other_src[:, -1] = (src[:, -1] + 1) % 97
    assert (model(other_src, tgt).logits[:, 0] - a[:, 0]).abs().max() > 1e-6


def test_encoder_without_positions_is_permutation_equivariant():
    model = tiny("bert_small", positional="none", type_vocab_size=0, dropout=0.0).eval()
    ids = torch.randint(5, 97, (2, 10))
    perm = torch.randperm(10)
    out = model(ids).logits
    assert torch.allclose(model(ids[:, perm]).logits, out[:, perm], atol=1e-5)


@pytest.mark.parametrize("positional", POSITIONED)
def test_encoder_with_positions_is_not_permutation_equivariant(positional):
    model = tiny("bert_small", positional=positional, dropout=0.0, init_std=0.2).eval()
    ids = torch.randint(5, 97, (1, 10))
    # not a reversal (ALiBi's |i - j| is reversal-symmetric)
    perm = torch.tensor([3, 0, 7, 1, 9, 2, 8, 4, 6, 5])
    assert (model(ids[:, perm]).logits - model(ids).logits[:, perm]).abs().max() > 1e-3


@pytest.mark.parametrize("positional", SCHEMES)
def test_encoder_appended_pads_change_nothing(positional):
    model = tiny("bert_small", positional=positional, dropout=0.0).eval()
    ids = torch.randint(5, 97, (1, 8))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 8), torch.zeros(1, 4)], dim=1).long()
    assert torch.allclose(model(padded, attention_mask=mask).logits[:, :8], model(ids).logits, atol=1e-5)


def test_encoder_decoder_source_pads_change_nothing():
    model = tiny("transformer_tiny", dropout=0.0).eval()
    src, tgt = torch.randint(5, 97, (1, 7)), torch.randint(5, 97, (1, 5))
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 7), torch.zeros(1, 3)], dim=1).long()
    assert torch.allclose(model(padded, tgt, attention_mask=mask).logits, model(src, tgt).logits, atol=1e-5)


@pytest.mark.parametrize("positional", SCHEMES)
def test_decoder_left_padding_with_position_ids(positional):
    model = tiny("gpt_nano", positional=positional).eval()
    ids = torch.randint(5, 97, (1, 6))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3), torch.ones(1, 6)], dim=1).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(padded, attention_mask=mask, position_ids=pos).logits[:, 3:]
    assert torch.allclose(out, model(ids).logits, atol=1e-5)


def test_loss_semantics_match_cross_entropy_definitions():
    model = tiny("gpt_nano").eval()
    ids = torch.randint(5, 97, (2, 9))
    labels = ids.clone()
    labels[0, 4] = -100
    out = model(ids, labels=labels)
    logits, target = out.logits[:, :-1], labels[:, 1:]  # decoder: position t predicts token t+1
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 97), target.reshape(-1),
                                                 ignore_index=-100)
    assert torch.allclose(out.loss, expected, atol=1e-6)

    mlm = tiny("bert_small", dropout=0.0).eval()
    mlm_labels = torch.full_like(ids, -100)
    mlm_labels[:, 3] = ids[:, 3]
    out = mlm(ids, labels=mlm_labels)
    assert torch.allclose(out.loss, torch.nn.functional.cross_entropy(out.logits[:, 3], ids[:, 3]), atol=1e-6)

    seq2seq = tiny("transformer_tiny", dropout=0.0).eval()
    tgt = torch.randint(5, 97, (2, 6))
    out = seq2seq(ids, labels=tgt)  # decoder input = labels shifted right behind the start token
    assert torch.equal(seq2seq.shift_right(tgt)[:, 0], torch.full((2,), seq2seq.config.start_id))
    assert torch.allclose(out.logits, seq2seq(ids, seq2seq.shift_right(tgt)).logits)
    assert torch.allclose(out.loss,
                          torch.nn.functional.cross_entropy(out.logits.reshape(-1, 97), tgt.reshape(-1)))


def test_classifier_head():
    model = tiny("bert_small", head=dict(name="classifier", num_labels=3), dropout=0.0).eval()
    ids = torch.randint(5, 97, (4, 7))
    labels = torch.tensor([0, 2, 1, 1])
    out = model(ids, labels=labels)
    assert out.logits.shape == (4, 3)
    assert torch.allclose(out.loss, torch.nn.functional.cross_entropy(out.logits, labels))


def test_tied_and_shared_embeddings():
    model = zoo.build("transformer_tiny")
    assert model.head.proj.weight is model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    untied = zoo.build("transformer_tiny", share_embeddings=False, tie_embeddings=False)
    assert untied.src_embed.tokens.weight is not untied.tgt_embed.tokens.weight
    assert untied.head.proj.weight is not untied.tgt_embed.tokens.weight
