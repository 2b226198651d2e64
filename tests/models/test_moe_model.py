"""ffn=moe on every architecture, and what else keeps working with it: the KV cache and beam search (cached
equals uncached), LoRA on the experts' linears, freezing, activation checkpointing (same gradients), the
parameter table's total and active counts (closed form), tracing, speculative decoding."""

from __future__ import annotations

import pytest
import torch

from zoo.config import ModelConfig
from zoo.finetune.freeze import freeze
from zoo.finetune.lora import add_lora
from zoo.inspection import flops_per_token, parameter_counts, trace
from zoo.models import build_model
from zoo.modules.checkpointing import set_activation_checkpointing
from zoo.modules.moe import MoE, auxiliary_loss, moe_layers

MOE = {"name": "moe", "n_experts": 4, "top_k": 2, "balance": {"aux": 0.01, "z": 0.001}}


def _cfg(arch: str = "decoder", **keys) -> ModelConfig:
    base = dict(arch=arch, d_model=16, n_heads=2, n_layers=2, vocab_size=40, max_seq_len=24, d_ff=24,
                activation="swiglu", ffn=MOE, positional="rope")
    return ModelConfig(**{**base, **keys})


def _loss(model, ids: torch.Tensor) -> torch.Tensor:
    if model.config.arch == "encoder_decoder":
        out = model(ids, decoder_input_ids=ids, labels=ids)
    else:
        out = model(ids, labels=ids)
    return out.loss + auxiliary_loss(model)


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_every_arch_trains_with_moe(arch):
    torch.manual_seed(0)
    model = build_model(_cfg(arch))
    expected = 2 if arch != "encoder_decoder" else 4  # both stacks' layers
    assert len(moe_layers(model)) == expected
    ids = torch.randint(3, 40, (4, 12))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(15):
        opt.zero_grad()
        loss = _loss(model, ids)
        loss.backward()
        first = float(loss) if first is None else first
        opt.step()
    assert float(loss) < 0.7 * first
    assert all(p.grad is not None for p in model.parameters())


def test_cached_decoding_and_beam_search_equal_the_uncached_ones():
    model = build_model(_cfg(ffn={**MOE, "capacity_factor": 0.5})).eval()  # capacity: training only
    ids = torch.randint(3, 40, (2, 5))
    for beams in (1, 2):
        cached = model.generate(ids, max_new_tokens=6, num_beams=beams, use_cache=True)
        plain = model.generate(ids, max_new_tokens=6, num_beams=beams, use_cache=False)
        assert torch.equal(cached, plain)
    with torch.no_grad():  # one token at a time through the cache = the whole sequence at once
        full = model(ids).logits
        cache = model.new_cache()
        steps = [model(ids[:, t:t + 1], cache=cache).logits for t in range(ids.shape[1])]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)


def test_speculative_decoding_with_moe_target_and_draft_equals_greedy():
    model = build_model(_cfg(n_layers=2)).eval()
    draft = build_model(_cfg(n_layers=1, ffn={**MOE, "top_k": 1})).eval()
    ids = torch.randint(3, 40, (1, 5))
    plain = model.generate(ids, max_new_tokens=8)
    assert torch.equal(model.generate(ids, max_new_tokens=8, assistant_model=draft), plain)


def test_lora_targets_the_experts_linears():
    model = build_model(_cfg())
    paths = add_lora(model, rank=2, alpha=4, dropout=0.0, targets=["experts.1.up", "ffn.router.proj"])
    assert sorted(paths) == [f"decoder_stack.layers.{i}.ffn.{name}" for i in (0, 1)
                             for name in ("experts.1.up", "router.proj")]
    assert sum("lora_" in n for n, _ in model.named_parameters()) == 8  # A and B of 4 adapted linears
    _loss(model, torch.randint(3, 40, (2, 8))).backward()
    assert model.decoder_stack.layers[0].ffn.experts[1].up.lora_B.grad is not None


def test_freezing_an_moe_layer_freezes_its_router_and_experts():
    model = build_model(_cfg())
    freeze(model, ["decoder_stack.layers.0"])
    layer = model.decoder_stack.layers[0].ffn
    assert not any(p.requires_grad for p in layer.parameters())
    _loss(model, torch.randint(3, 40, (2, 8))).backward()
    assert all(p.grad is None for p in layer.parameters())
    assert model.decoder_stack.layers[1].ffn.router.proj.weight.grad is not None


def test_activation_checkpointing_gives_the_same_loss_and_gradients():
    ids = torch.randint(3, 40, (2, 10))
    grads = []
    for enabled in (False, True):
        torch.manual_seed(0)
        model = build_model(_cfg(ffn={**MOE, "capacity_factor": 1.0})).train()
        set_activation_checkpointing(model, enabled)
        loss = _loss(model, ids)
        loss.backward()
        grads.append((float(loss), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-6)
    for name, g in grads[0][1].items():
        torch.testing.assert_close(grads[1][1][name], g, atol=1e-6, rtol=0)


def test_total_and_active_parameter_counts():
    d, f, e, k, layers = 16, 24, 4, 2, 2
    model = build_model(_cfg(bias=False, ffn={"name": "moe", "n_experts": e, "top_k": k,
                                              "n_shared_experts": 1}))
    expert = d * 2 * f + f * d  # swiglu: up (2f, d) + down (d, f)
    per_layer_moe = d * e + e * expert + expert  # router + experts + one shared expert
    counts = parameter_counts(model)
    assert counts["ffn"] == layers * per_layer_moe
    assert counts["total"] - counts["active"] == layers * (e - k) * expert
    dense = build_model(_cfg(bias=False, ffn="mlp"))
    matmul_dense_ffn = layers * expert
    active_ffn_matmul = layers * (d * e + (k + 1) * expert)
    assert (flops_per_token(model).n_matmul - flops_per_token(dense).n_matmul
            == active_ffn_matmul - matmul_dense_ffn)
    assert isinstance(model.decoder_stack.layers[0].ffn, MoE)


def test_trace_records_each_expert_over_its_own_tokens():
    model = build_model(_cfg()).eval()
    ids = torch.randint(3, 40, (1, 6))
    records = [r for r in trace(model, ids).records
               if r.name == "ffn_hidden" and r.module.startswith("decoder_stack.layers.0.ffn.experts.")]
    assert len(records) == 4  # every expert runs (an empty block too)
    assert sum(r.shape[0] for r in records) == 6 * 2  # tokens * top_k assignments
