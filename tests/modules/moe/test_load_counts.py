"""The load an MoE layer counts between optimizer steps (for the sigmoid_bias router's update) is declared
state of the layer: a buffer from construction (long, one count per expert), outside the state dict, so a
checkpoint holds what it held before (the parameters and the router's bias)."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.modules.moe import moe_layers, record_load, update_routers

MOE = {"name": "moe", "n_experts": 4, "top_k": 2, "router": {"name": "sigmoid_bias", "bias_rate": 0.01},
       "balance": {}}


def _model():
    torch.manual_seed(0)
    return zoo.build(dict(arch="decoder", vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_seq_len=16,
                          d_ff=24, ffn=MOE, positional="rope", dropout=0.0))


def test_the_load_count_is_a_long_buffer_from_construction_and_stays_out_of_checkpoints():
    model = _model()
    layers = [layer for _, layer in moe_layers(model)]
    assert len(layers) == 2
    for layer in layers:
        assert "pending_load" in dict(layer.named_buffers())  # declared when built, not set later
        assert layer.pending_load.dtype == torch.long and layer.pending_load.tolist() == [0, 0, 0, 0]
    state = model.state_dict()
    assert not [k for k in state if k.endswith("pending_load")]
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}  # tied ones under each name
    assert set(state) - params == {f"{path}.router.bias" for path, _ in moe_layers(model)}
    assert model.to(torch.float64).get_submodule(moe_layers(model)[0][0]).pending_load.dtype == torch.long


def test_two_forwards_are_summed_and_one_update_moves_the_bias_by_their_sum_then_clears_it():
    model = _model()
    ids = torch.randint(0, 40, (2, 8))
    loads = []
    for _ in range(2):  # gradient accumulation: two forwards, one optimizer step
        model(ids)
        loads.append([layer.last.load.clone() for _, layer in moe_layers(model)])
        record_load(model)
    for i, (_, layer) in enumerate(moe_layers(model)):
        assert torch.equal(layer.pending_load, loads[0][i] + loads[1][i])
    sums = [l0 + l1 for l0, l1 in zip(*loads, strict=True)]
    expected = [0.01 * torch.sign(load.float().mean() - load) for load in sums]
    update_routers(model)
    for (_, layer), bias in zip(moe_layers(model), expected, strict=True):
        assert layer.router.bias.tolist() == pytest.approx(bias.tolist())
        assert layer.pending_load.tolist() == [0, 0, 0, 0]
    update_routers(model)  # nothing counted since: the bias stays
    for (_, layer), bias in zip(moe_layers(model), expected, strict=True):
        assert layer.router.bias.tolist() == pytest.approx(bias.tolist())


def test_a_checkpoint_of_the_state_dict_loads_strictly_into_a_fresh_model():
    trained, fresh = _model(), _model()
    trained(torch.randint(0, 40, (1, 8)))
    record_load(trained)
    update_routers(trained)
    fresh.load_state_dict(trained.state_dict())  # strict: no key missing, none unexpected
    for (_, a), (_, b) in zip(moe_layers(trained), moe_layers(fresh), strict=True):
        assert torch.equal(a.router.bias, b.router.bias)
