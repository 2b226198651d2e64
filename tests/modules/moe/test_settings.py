"""model.moe: one clear error per bad key or value, entry-only keys accepted only with their entry, the layer
pattern, shared experts, and model.moe refused without ffn=moe."""

from __future__ import annotations

import pytest

from zoo.config import ModelConfig
from zoo.models import build_model
from zoo.modules.moe import MoE, MoESettings


def _cfg(**moe) -> ModelConfig:
    return ModelConfig(d_model=16, n_heads=2, n_layers=4, vocab_size=32, max_seq_len=16, ffn="moe",
                       moe={"n_experts": 4, "top_k": 2, **moe})


@pytest.mark.parametrize("moe, message", [
    ({"n_expert": 4}, "Did you mean 'model.moe.n_experts'"),
    ({"top_k": 0}, "model.moe.top_k must be an integer >= 1"),
    ({"top_k": 5}, "model.moe.top_k=5 exceeds model.moe.n_experts=4"),
    ({"router": "softmax"}, "model.moe.router: Unknown router 'softmax'"),
    ({"balance": ["aux", "zz"]}, "model.moe.balance: Unknown balancing loss 'zz'"),
    ({"capacity_factor": 0}, "model.moe.capacity_factor must be null or a finite number > 0"),
    ({"bias_rate": 0.01}, "model.moe.bias_rate is not read by the chosen model.moe.router=topk_softmax"),
    ({"z_coef": 0.01}, "it applies to model.moe.balance=z"),
])
def test_bad_moe_keys_get_one_clear_error(moe, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        build_model(_cfg(**moe))


def test_moe_keys_without_ffn_moe_are_refused():
    with pytest.raises(ValueError, match="model.moe=.* has no effect with model.ffn='mlp'.*model.ffn=moe"):
        build_model(ModelConfig(d_model=16, n_heads=2, moe={"n_experts": 4}))


def test_entry_keys_with_their_entry_are_accepted():
    build_model(_cfg(router="sigmoid_bias", bias_rate=0.01, balance=["aux", "z"], aux_coef=0.1, z_coef=0.1))


@pytest.mark.parametrize("pattern, expected", [
    ({}, [True, True, True, True]),
    ({"every": 2}, [False, True, False, True]),
    ({"first_dense": 1}, [False, True, True, True]),
    ({"every": 2, "first_dense": 2}, [False, False, False, True]),
])
def test_layer_pattern(pattern, expected):
    model = build_model(_cfg(**pattern))
    assert [isinstance(layer.ffn, MoE) for layer in model.decoder_stack.layers] == expected
    assert [MoESettings(**pattern).layer_is_moe(i) for i in range(4)] == expected


def test_expert_and_shared_widths():
    model = build_model(_cfg(expert_d_ff=8, n_shared_experts=3))
    moe = model.decoder_stack.layers[0].ffn
    assert moe.experts[0].down.in_features == 8 and moe.shared.down.in_features == 24
    assert moe.shared_gate is None and len(moe.experts) == 4


@pytest.mark.parametrize("pattern, message", [
    ({"first_dense": 4}, r"model.moe.first_dense=4 leaves no MoE layer in model.n_layers=4 "),
    ({"first_dense": 9}, r"model.moe.first_dense=9 leaves no MoE layer in model.n_layers=4 "),
    ({"every": 5}, r"model.moe.every=5 leaves no MoE layer in model.n_layers=4 "),
    ({"every": 3, "first_dense": 3}, r"model.moe.first_dense=3 and model.moe.every=3 leave no MoE layer"),
])
def test_a_pattern_without_moe_layer_is_refused(pattern, message):
    """ffn=moe whose layer pattern makes every layer dense would train a dense model with no note."""
    with pytest.raises(ValueError, match=message):
        build_model(_cfg(**pattern))


def test_an_encoder_decoder_with_moe_only_in_its_deeper_stack_is_accepted():
    cfg = ModelConfig(arch="encoder_decoder", d_model=16, n_heads=2, n_layers=2, encoder_layers=4,
                      vocab_size=32, max_seq_len=16, ffn="moe", moe={"n_experts": 4, "first_dense": 3})
    model = build_model(cfg)
    assert [isinstance(layer.ffn, MoE) for layer in model.encoder_stack.layers] == [False] * 3 + [True]
