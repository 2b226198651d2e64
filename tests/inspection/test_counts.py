"""Parameter counts by component and FLOPs per token against closed forms written here, and FLOPs against
torch's own FlopCounterMode on a real forward and backward."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import zoo
from zoo.inspection import flops_per_token, parameter_counts, parameter_table

from .configs import VOCAB, config


def _attn(C, H, KV, D, bias):
    """q, [k|v] (fused for self, split for cross: same sizes) and o, with optional biases."""
    q, kv = H * D, KV * D
    return C * (q + 2 * kv) + q * C + (bias * (q + 2 * kv + C))


def _ffn(C, F, gated, bias):
    up = F * (2 if gated else 1)
    return C * up + F * C + bias * (up + C)


def test_gpt_counts_closed_form():
    cfg = config("gpt")  # learned positions, layernorm with bias, tied head, gelu
    V, C, L, T = VOCAB, 32, 2, cfg.max_seq_len
    counts = parameter_counts(zoo.build(cfg))
    assert counts["embeddings"] == V * C + T * C
    assert counts["attention"] == L * (4 * C * C + 4 * C)
    assert counts["ffn"] == L * (2 * C * 4 * C + 4 * C + C)
    assert counts["norms"] == (2 * L + 1) * 2 * C
    assert counts["head"] == 0  # tied to the token table, counted once under embeddings


def test_llama_gqa_counts_closed_form():
    cfg = config("llama_gqa")  # rope, rmsnorm, swiglu, no bias, GQA 4/2, untied head
    V, C, L, H, KV, F = VOCAB, 32, 2, 4, 2, 40
    D = C // H
    counts = parameter_counts(zoo.build(cfg))
    assert counts["embeddings"] == V * C
    assert counts["attention"] == L * (C * (H * D + 2 * KV * D) + H * D * C)
    assert counts["ffn"] == L * (C * 2 * F + F * C)
    assert counts["norms"] == (2 * L + 1) * C
    assert counts["head"] == V * C


def test_bert_and_encoder_decoder_counts_closed_form():
    bert = config("bert")
    V, C, L, T = VOCAB, 32, 2, bert.max_seq_len
    counts = parameter_counts(zoo.build(bert))
    assert counts["embeddings"] == V * C + T * C + 2 * C
    assert counts["norms"] == (1 + 2 * L + 1) * 2 * C  # embed norm, 2 per layer, head transform norm
    assert counts["head"] == C * C + C + V  # transform dense + vocabulary bias (weight tied)
    enc_dec = config("transformer")  # 2 encoder + 1 decoder layer, sinusoidal: no position table
    counts = parameter_counts(zoo.build(enc_dec))
    H, D, F = 4, 8, 48
    assert counts["embeddings"] == V * C  # one table shared by source, target and head
    assert counts["attention"] == 3 * _attn(C, H, H, D, 1) + 1 * _attn(C, H, H, D, 1)  # + cross
    assert counts["ffn"] == 3 * _ffn(C, F, False, 1)
    assert counts["norms"] == (2 * 2 + 3 * 1) * 2 * C  # post-LN: no final norm


@pytest.mark.parametrize("name", ["gpt", "llama_gqa", "mqa_alibi", "bert", "transformer", "minimal", "mla"])
def test_counts_cover_every_unique_parameter(name):
    model = zoo.build(config(name))
    counts = parameter_counts(model)
    unique = {id(p): p.numel() for p in model.parameters()}
    assert counts["total"] == sum(unique.values()) == model.num_parameters()
    assert counts.get("other", 0) == 0
    rows = parameter_table(model).row_count
    assert rows == len(counts)


def test_flops_closed_form_for_gpt():
    cfg = config("gpt")
    V, C, L, T = VOCAB, 32, 2, 12
    f = flops_per_token(zoo.build(cfg), T)
    n_matmul = L * (4 * C * C + 2 * C * 4 * C) + V * C  # qkv + o + up + down per layer, then the head
    assert f.n_matmul == n_matmul
    assert f.forward == 2 * n_matmul + 4 * L * T * C
    assert f.training == 6 * n_matmul + 12 * L * T * C


@pytest.mark.parametrize("name", ["gpt", "llama_gqa", "transformer", "mla"])
def test_flops_match_torch_flop_counter(name):
    """FlopCounterMode counts the matmuls of a real forward (explicit attention) and backward."""
    cfg = config(name)
    model = zoo.build(cfg)
    T = 6
    ids = torch.randint(3, VOCAB, (1, T))
    kwargs = {"decoder_input_ids": ids} if cfg.arch == "encoder_decoder" else {}
    f = flops_per_token(model, T)
    with FlopCounterMode(display=False) as forward:
        out = model(ids, need_weights=True, **kwargs)
    assert forward.get_total_flops() == T * f.forward
    with FlopCounterMode(display=False) as backward:
        out.logits.float().pow(2).mean().backward()
    assert forward.get_total_flops() + backward.get_total_flops() == T * f.training


def test_flops_rejects_bad_length():
    with pytest.raises(ValueError, match="seq_len"):
        flops_per_token(zoo.build(config("gpt")), 0)
