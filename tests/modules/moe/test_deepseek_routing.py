"""DeepSeek's routing against transformers' own modules built from tiny configs, weights copied:
`sigmoid_bias` with groups against DeepseekV3TopkRouter (sigmoid + correction bias, group-limited top-k,
norm_topk_prob, routed_scaling_factor), `group_limited_greedy` against DeepseekV2TopkRouter, equal scores
broken the same way; the whole MoE layer (shared experts) against DeepseekV3MoE, outputs and gradients."""

from __future__ import annotations

import pytest
import torch
from transformers import DeepseekV2Config, DeepseekV3Config
from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE, DeepseekV3TopkRouter

from zoo import build
from zoo.config import ModelConfig
from zoo.modules.ffn_settings import FFN
from zoo.modules.moe import ROUTERS, MoE, moe_layers, record_load, update_routers

D, F, E = 16, 12, 8


def _by_expert(experts: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's chosen experts in index order, with their weights (the references choose unsorted)."""
    order = experts.argsort(dim=-1)
    return experts.gather(-1, order), weights.gather(-1, order)


def _zoo_router(router: dict, top_k: int, route_scale: float) -> torch.nn.Module:
    settings = FFN.parse({"name": "moe", "n_experts": E, "top_k": top_k, "route_scale": route_scale,
                          "router": router})
    settings.router.check(settings)
    return ROUTERS.get(router["name"])(D, settings)


def _inputs(kind: str, weight: torch.Tensor) -> torch.Tensor:
    """Router weights (E, D) filled per case; random tokens. `ties`: every score equal; `pairs`: experts
    2i and 2i+1 (and so the groups of a pair layout) score alike."""
    with torch.no_grad():
        if kind == "random":
            weight.normal_(0, 0.5)
        elif kind == "ties":
            weight.zero_()
        elif kind == "pairs":
            weight.copy_(torch.randn(E // 2, D).repeat_interleave(2, dim=0) * 0.5)
    return torch.randn(64, D)


V3_CASES = [  # (n_group, topk_group, top_k, norm_topk_prob, routed_scaling_factor)
    (4, 2, 3, True, 2.5),
    (2, 1, 4, True, 1.0),
    (4, 3, 2, False, 1.5),
    (1, 1, 2, True, 2.5),
]


@pytest.mark.parametrize("kind", ["random", "ties", "pairs"])
@pytest.mark.parametrize(("n_group", "topk_group", "top_k", "norm", "scale"), V3_CASES)
def test_sigmoid_bias_with_groups_equals_deepseek_v3_router(kind, n_group, topk_group, top_k, norm, scale):
    hf = DeepseekV3TopkRouter(DeepseekV3Config(
        hidden_size=D, num_attention_heads=2, n_routed_experts=E, num_experts_per_tok=top_k, n_group=n_group,
        topk_group=topk_group, norm_topk_prob=norm, routed_scaling_factor=scale))
    x = _inputs(kind, hf.weight)
    if kind != "ties":  # the correction bias takes part in the choice (and so in the group scores)
        hf.e_score_correction_bias.copy_(torch.randn(E) * 0.1)
    if kind == "pairs":
        hf.e_score_correction_bias.copy_(hf.e_score_correction_bias[::2].repeat_interleave(2))
    ours = _zoo_router({"name": "sigmoid_bias", "n_group": n_group, "topk_group": topk_group,
                        "norm_topk_prob": norm}, top_k, scale)
    with torch.no_grad():
        ours.proj.weight.copy_(hf.weight)
        ours.bias.copy_(hf.e_score_correction_bias)
        logits, hf_weights, hf_experts = hf(x)
        got = ours(x)
    experts, weights = _by_expert(got.experts, got.weights)
    want_experts, want_weights = _by_expert(hf_experts, hf_weights)
    assert torch.equal(experts, want_experts)
    torch.testing.assert_close(weights, want_weights, rtol=0, atol=1e-6)
    assert torch.equal(got.logits, logits)


@pytest.mark.parametrize("kind", ["random", "ties", "pairs"])
@pytest.mark.parametrize(("method", "n_group", "topk_group", "top_k"), [
    ("group_limited_greedy", 4, 2, 3),
    ("group_limited_greedy", 8, 3, 2),  # one expert per group: a group's score is its expert's
    ("group_limited_greedy", 2, 1, 4),
    ("greedy", None, None, 2),  # V2-Lite's plain top-k: softmax_topk
])
def test_group_limited_greedy_equals_deepseek_v2_router(kind, method, n_group, topk_group, top_k):
    hf = DeepseekV2TopkRouter(DeepseekV2Config(
        hidden_size=D, num_attention_heads=2, n_routed_experts=E, num_experts_per_tok=top_k, n_group=n_group,
        topk_group=topk_group, topk_method=method, routed_scaling_factor=16.0))
    x = _inputs(kind, hf.weight)
    router = ({"name": "group_limited_greedy", "n_group": n_group, "topk_group": topk_group}
              if method == "group_limited_greedy" else {"name": "softmax_topk"})
    ours = _zoo_router(router, top_k, 16.0)
    with torch.no_grad():
        ours.proj.weight.copy_(hf.weight)
        _, hf_weights, hf_experts = hf(x)
        got = ours(x)
    experts, weights = _by_expert(got.experts, got.weights)
    want_experts, want_weights = _by_expert(hf_experts, hf_weights)
    assert torch.equal(experts, want_experts)
    torch.testing.assert_close(weights, want_weights, rtol=0, atol=1e-6)


@pytest.mark.parametrize("cast", ["model.to(bfloat16)", "bf16 autocast"])
@pytest.mark.parametrize("name", ["sigmoid_bias", "group_limited_greedy", "softmax_topk"])
def test_deepseek_routers_route_in_float32_in_a_bf16_model(name, cast):
    """DeepSeek routes in float32: transformers' routers take float32 logits from float32 weights (it loads
    mlp.gate and the correction bias in float32 into a bf16 model). zoo's DeepSeek routers keep their weights
    float32 when the model is cast to bf16, and compute the logits in float32 (autocast too), so the experts
    of bf16 hidden states are the float32 reference's. 8 of 64 experts in 8 groups, init-sized weights (close
    calls): a bf16 matmul gave 1-2% of the tokens other experts. softmax_topk is V2-Lite's greedy routing,
    float32 by its setting (the default follows Qwen / OLMoE, which route in the model's dtype)."""
    d, e, tokens = 256, 64, 4096
    if name == "sigmoid_bias":
        hf = DeepseekV3TopkRouter(DeepseekV3Config(hidden_size=d, num_attention_heads=2, n_routed_experts=e,
                                                   num_experts_per_tok=8, n_group=8, topk_group=4))
        router = {"name": name, "n_group": 8, "topk_group": 4, "norm_topk_prob": True}
    elif name == "group_limited_greedy":
        hf = DeepseekV2TopkRouter(DeepseekV2Config(hidden_size=d, num_attention_heads=2, n_routed_experts=e,
                                                   num_experts_per_tok=8, n_group=8, topk_group=4,
                                                   topk_method=name))
        router = {"name": name, "n_group": 8, "topk_group": 4}
    else:
        hf = DeepseekV2TopkRouter(DeepseekV2Config(hidden_size=d, num_attention_heads=2, n_routed_experts=e,
                                                   num_experts_per_tok=8, topk_method="greedy"))
        router = {"name": name, "float32": True}
    settings = FFN.parse({"name": "moe", "n_experts": e, "top_k": 8, "router": router})
    ours = ROUTERS.get(name)(d, settings)
    torch.manual_seed(0)
    with torch.no_grad():
        hf.weight.normal_(0, 0.02)
        ours.proj.weight.copy_(hf.weight)
        if name == "sigmoid_bias":
            hf.e_score_correction_bias.copy_(torch.randn(e) * 1e-3)
            ours.bias.copy_(hf.e_score_correction_bias)
        x = torch.randn(tokens, d).bfloat16()  # a bf16 model's hidden states
        logits, _, want = hf(x.float())  # the float32 reference on the same values
        if cast == "model.to(bfloat16)":
            ours = ours.to(torch.bfloat16)
            assert {t.dtype for t in [*ours.parameters(), *ours.buffers()]} == {torch.float32}
            got = ours(x)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = ours(x.float())
    assert torch.equal(got.logits, logits)
    assert torch.equal(got.experts.sort(dim=-1).values, want.sort(dim=-1).values)


def test_the_chosen_experts_come_best_first():
    """The dispatch's capacity priority reads the choice order: the first choice is the best biased score."""
    ours = _zoo_router({"name": "sigmoid_bias", "n_group": 4, "topk_group": 2}, 3, 1.0)
    x = torch.randn(32, D)
    with torch.no_grad():
        ours.bias.copy_(torch.randn(E) * 0.1)
        got = ours(x)
        choice = (ours.proj(x).sigmoid() + ours.bias).gather(-1, got.experts)
    assert (choice[:, :-1] >= choice[:, 1:]).all()


def _copy_mlp(ours: torch.nn.Module, mlp: torch.nn.Module) -> None:
    ours.up.weight.copy_(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))  # zoo's [gate | value]
    ours.down.weight.copy_(mlp.down_proj.weight)


def test_moe_layer_equals_deepseek_v3_moe_outputs_and_gradients():
    hf = DeepseekV3MoE(DeepseekV3Config(
        hidden_size=D, num_attention_heads=2, moe_intermediate_size=F, n_routed_experts=E,
        num_experts_per_tok=3, n_group=4, topk_group=2, n_shared_experts=2, routed_scaling_factor=2.5,
        norm_topk_prob=True, hidden_act="silu"))
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)
        hf.gate.e_score_correction_bias.normal_(0, 0.1)
    cfg = ModelConfig(d_model=D, n_heads=2, d_ff=F, activation="swiglu", bias=False, ffn={
        "name": "moe", "n_experts": E, "top_k": 3, "n_shared_experts": 2, "route_scale": 2.5, "balance": {},
        "router": {"name": "sigmoid_bias", "n_group": 4, "topk_group": 2}})
    ours = MoE(cfg, cfg.ffn)
    with torch.no_grad():
        ours.router.proj.weight.copy_(hf.gate.weight)
        ours.router.bias.copy_(hf.gate.e_score_correction_bias)
        for i, expert in enumerate(ours.experts):
            expert.up.weight.copy_(hf.experts.gate_up_proj[i])  # (2F, D) rows [gate | up]
            expert.down.weight.copy_(hf.experts.down_proj[i])
        _copy_mlp(ours.shared, hf.shared_experts)
    x = torch.randn(3, 7, D)
    x_ours, x_hf = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, want = ours(x_ours), hf(x_hf)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-5)
    g = torch.randn_like(out)
    out.backward(g)
    want.backward(g)
    close = dict(rtol=0, atol=1e-5)
    torch.testing.assert_close(x_ours.grad, x_hf.grad, **close)
    torch.testing.assert_close(ours.router.proj.weight.grad, hf.gate.weight.grad, **close)
    torch.testing.assert_close(torch.stack([e.up.weight.grad for e in ours.experts]),
                               hf.experts.gate_up_proj.grad, **close)
    torch.testing.assert_close(torch.stack([e.down.weight.grad for e in ours.experts]),
                               hf.experts.down_proj.grad, **close)
    sh = hf.shared_experts
    torch.testing.assert_close(ours.shared.up.weight.grad,
                               torch.cat([sh.gate_proj.weight.grad, sh.up_proj.weight.grad]), **close)


def test_the_grouped_router_follows_the_load_like_sigmoid_bias():
    """A grouped router's bias moves by b_i += rate * sign(mean load - load_i) after an optimizer step."""
    model = build(dict(arch="decoder", vocab_size=40, d_model=16, n_heads=2, n_layers=1, max_seq_len=16,
                       d_ff=12, ffn={"name": "moe", "n_experts": E, "top_k": 2, "balance": {}, "router": {
                           "name": "sigmoid_bias", "n_group": 4, "topk_group": 2, "bias_rate": 0.01}}))
    (_, layer), = moe_layers(model)
    model(torch.randint(0, 40, (2, 8)))
    load = layer.last.load.clone()
    record_load(model)
    update_routers(model)
    expected = 0.01 * torch.sign(load.float().mean() - load)
    assert layer.router.bias.tolist() == pytest.approx(expected.tolist())


@pytest.mark.parametrize("preset", ["deepseek_v3_671b", "deepseek_v2_lite"])
def test_a_quantised_float32_router_computes_through_its_own_layer(preset):
    """zoo.quantize replaces every nn.Linear, the routers' too: a float32 router then runs its quantised layer
    on float32 inputs (it has no float `weight` to multiply by)."""
    from tests.models.tiny import tiny
    from zoo import quantize
    from zoo.modules.moe.routers import Router

    model = quantize(tiny(preset).eval(), "int8")
    router = next(m for m in model.modules() if isinstance(m, Router))
    assert router.float32 and type(router.proj) is not torch.nn.Linear
    x = torch.randn(5, model.config.d_model).bfloat16()
    with torch.no_grad():
        assert torch.equal(router(x).logits, router.proj(x.float()).float())
        assert torch.isfinite(model(torch.randint(3, model.config.vocab_size, (1, 6))).logits).all()
