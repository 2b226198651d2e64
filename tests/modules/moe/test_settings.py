"""model.ffn=moe: one clear error per bad key or value, a router's key accepted only with that router, the
balancing losses as name -> coefficient, the layer pattern, shared experts; the MoE keys belong to the FFN
part, so choosing another FFN drops them."""

from __future__ import annotations

import re

import pytest

from zoo import build
from zoo.config import ModelConfig
from zoo.models import build_model
from zoo.modules.moe import MoE


def _cfg(layer_pattern=None, **moe) -> ModelConfig:
    return ModelConfig(d_model=16, n_heads=2, n_layers=4, vocab_size=32, max_seq_len=16,
                       ffn={"name": "moe", "n_experts": 4, "top_k": 2, **moe}, layer_pattern=layer_pattern)


@pytest.mark.parametrize("moe, message", [
    ({"n_expert": 4}, "model.ffn=moe has no key 'n_expert'. Did you mean 'n_experts'?"),
    ({"top_k": 0}, "model.ffn.top_k must be an integer >= 1"),
    ({"top_k": 5}, "model.ffn.top_k=5 exceeds model.ffn.n_experts=4"),
    ({"router": "softmax"}, "model.ffn.router: Unknown ffn.router 'softmax'. Did you mean 'topk_softmax'?"),
    ({"balance": {"aux": 0.01, "zz": 0.1}}, "model.ffn.balance.zz: Unknown balancing loss 'zz'"),
    ({"balance": ["aux"]}, "model.ffn.balance must be a mapping of balancing loss names (aux, z) to "
                           "coefficients >= 0 ({} for none)"),
    ({"balance": {"aux": -1}}, "model.ffn.balance must be a mapping"),
    ({"capacity_factor": 0}, "model.ffn.capacity_factor must be null or a finite number > 0"),
    ({"router": {"name": "topk_softmax", "bias_rate": 0.01}},
     "model.ffn.router=topk_softmax has no key 'bias_rate'. model.ffn.router.bias_rate is read by "
     "ffn.router=sigmoid_bias"),
    ({"router": {"name": "sigmoid_bias", "n_group": 3}},
     "model.ffn.router.n_group=3 does not divide model.ffn.n_experts=4; the experts are split into n_group "
     "equal groups."),
    ({"router": {"name": "group_limited_greedy", "n_group": 2, "topk_group": 3}},
     "model.ffn.router.topk_group=3 exceeds model.ffn.router.n_group=2; each token keeps the best topk_group "
     "of the n_group groups."),
    ({"top_k": 3, "router": {"name": "sigmoid_bias", "n_group": 2, "topk_group": 1}},
     "model.ffn.top_k=3 exceeds the 2 experts the kept groups hold (model.ffn.router.topk_group=1 of "
     "n_group=2 groups of 2); raise topk_group or lower top_k."),
    ({"top_k": 1, "router": {"name": "sigmoid_bias", "n_group": 4}},
     "model.ffn.router.n_group=4 leaves 1 expert per group of model.ffn.n_experts=4; sigmoid_bias scores a "
     "group by the sum of its top 2 experts, so n_experts / n_group must be >= 2."),
    ({"router": {"name": "sigmoid_bias", "n_group": 0}}, "model.ffn.router.n_group must be an integer >= 1"),
    ({"router": {"name": "group_limited_greedy", "norm_topk_prob": True}},
     "model.ffn.router=group_limited_greedy has no key 'norm_topk_prob'. model.ffn.router.norm_topk_prob is "
     "read by ffn.router=sigmoid_bias"),
])
def test_bad_moe_keys_get_one_clear_error(moe, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_model(_cfg(**moe))


def test_moe_keys_belong_to_the_moe_entry():
    """A MoE key under another FFN names the entry that reads it; choosing another FFN drops the keys."""
    with pytest.raises(ValueError, match=re.escape("model.ffn=mlp has no key 'n_experts'. "
                                                   "model.ffn.n_experts is read by ffn=moe: choose it with "
                                                   "model.ffn=moe")):
        ModelConfig(d_model=16, n_heads=2, ffn={"name": "mlp", "n_experts": 4})
    assert build("moe_small", ffn="mlp").config.ffn.to_data() == {"name": "mlp"}
    kept = build("moe_small", ffn={"top_k": 1}, n_layers=1, d_model=32).config.ffn
    assert (kept.name, kept.n_experts, kept.top_k) == ("moe", 8, 1)  # no name: the preset's entry, one key


def test_the_old_flat_moe_key_names_its_new_place():
    with pytest.raises(ValueError, match=re.escape("model.moe is now model.ffn: {name: moe, n_experts")):
        ModelConfig.from_dict({"ffn": "moe", "moe": {"n_experts": 4}})


def test_entry_keys_with_their_entry_are_accepted():
    model = build_model(_cfg(router={"name": "sigmoid_bias", "bias_rate": 0.01},
                             balance={"aux": 0.1, "z": 0.1}))
    layer = model.decoder_stack.layers[0].ffn
    assert layer.router.rate == 0.01
    assert {k: c for k, (_, c) in layer.balances.items()} == {"aux": 0.1, "z": 0.1}


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
                      vocab_size=32, max_seq_len=16, ffn={"name": "moe", "n_experts": 4},
                      layer_pattern={"prefix": ["dense"] * 3, "cycle": ["moe"]})
    model = build_model(cfg)
    assert [isinstance(layer.ffn, MoE) for layer in model.encoder_stack.layers] == [False] * 3 + [True]


def test_the_settings_tables_and_the_module_registries_name_the_same_entries():
    """The torch-free settings (zoo.modules.ffn_settings) and the modules that read them agree on the names;
    the balance rule's wording lists the registered losses."""
    from zoo.modules.feedforward import FFNS
    from zoo.modules.ffn_settings import _BALANCE, FFN, ROUTER
    from zoo.modules.moe import BALANCES, ROUTERS

    assert FFN.names() == FFNS.names() and ROUTER.names() == ROUTERS.names()
    assert f"({', '.join(BALANCES.names())})" in _BALANCE.allowed
