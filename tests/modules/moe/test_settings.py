"""model.moe: one clear error per bad key or value, entry-only keys accepted only with their entry, the layer
pattern, shared experts, and model.moe refused without ffn=moe."""

from __future__ import annotations

import re

import pytest

from zoo.config import ModelConfig
from zoo.models import build_model
from zoo.modules.moe import MoE


def _cfg(layer_pattern=None, **moe) -> ModelConfig:
    return ModelConfig(d_model=16, n_heads=2, n_layers=4, vocab_size=32, max_seq_len=16, ffn="moe",
                       moe={"n_experts": 4, "top_k": 2, **moe}, layer_pattern=layer_pattern)


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
    ([], [True, True, True, True]),
    (["dense", "moe"], [False, True, False, True]),  # Qwen's sparse step 2
    ({"prefix": ["dense"], "cycle": ["moe"]}, [False, True, True, True]),  # DeepSeek's first dense layers
    ({"prefix": ["dense", "dense"], "cycle": ["dense", "moe"]}, [False, False, False, True]),
])
def test_layer_pattern(pattern, expected):
    cfg = _cfg(layer_pattern=pattern)
    model = build_model(cfg)
    assert [isinstance(layer.ffn, MoE) for layer in model.decoder_stack.layers] == expected
    assert [cfg.layer_is_moe(i) for i in range(4)] == expected


def test_expert_and_shared_widths():
    model = build_model(_cfg(expert_d_ff=8, n_shared_experts=3))
    moe = model.decoder_stack.layers[0].ffn
    assert moe.experts[0].down.in_features == 8 and moe.shared.down.in_features == 24
    assert moe.shared_gate is None and len(moe.experts) == 4


@pytest.mark.parametrize("pattern", [
    {"prefix": ["dense"] * 4, "cycle": ["moe"]},
    {"prefix": ["dense"] * 9, "cycle": ["moe"]},
    ["dense"] * 4 + ["moe"],
    {"prefix": ["dense"] * 3, "cycle": ["dense", "dense", "moe"]},
])
def test_a_pattern_without_moe_layer_is_refused(pattern):
    """ffn=moe whose layer pattern makes every layer dense would train a dense model with no note."""
    message = (f"model.layer_pattern={pattern} tags every one of the 4 layers dense, so ffn=moe would train "
               "a dense model; tag some moe, or use model.ffn=mlp.")
    with pytest.raises(ValueError, match=re.escape(message)):
        build_model(_cfg(layer_pattern=pattern))


def test_an_encoder_decoder_with_moe_only_in_its_deeper_stack_is_accepted():
    cfg = ModelConfig(arch="encoder_decoder", d_model=16, n_heads=2, n_layers=2, encoder_layers=4,
                      vocab_size=32, max_seq_len=16, ffn="moe", moe={"n_experts": 4},
                      layer_pattern={"prefix": ["dense"] * 3, "cycle": ["moe"]})
    model = build_model(cfg)
    assert [isinstance(layer.ffn, MoE) for layer in model.encoder_stack.layers] == [False] * 3 + [True]
