"""The whole MoE layer against transformers' MixtralSparseMoeBlock and Qwen2MoeSparseMoeBlock (shared expert
with its sigmoid gate, norm_topk_prob both ways) built from small configs, weights copied."""

from __future__ import annotations

import pytest
import torch
from transformers import MixtralConfig, Qwen2MoeConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

from zoo.config import ModelConfig
from zoo.modules.moe import MoE

D, F, E = 16, 24, 4


def _copy_experts(ours: MoE, gate_up: torch.Tensor, down: torch.Tensor) -> None:
    for i, expert in enumerate(ours.experts):
        expert.up.weight.copy_(gate_up[i])  # (2F, D) rows [gate | up]: zoo's [gate | value] layout
        expert.down.weight.copy_(down[i])


def _perturb(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)


def _zoo(**moe) -> MoE:
    cfg = ModelConfig(d_model=D, n_heads=2, d_ff=F, activation="swiglu", bias=False,
                      ffn={"name": "moe", "n_experts": E, **moe})
    return MoE(cfg, cfg.ffn)


@pytest.mark.parametrize("router", ["topk_softmax", "softmax_topk_norm"])
def test_equals_mixtral_block(router):
    hf = MixtralSparseMoeBlock(MixtralConfig(hidden_size=D, intermediate_size=F, num_local_experts=E,
                                             num_experts_per_tok=2)).eval()
    _perturb(hf)
    ours = _zoo(top_k=2, router=router).eval()
    with torch.no_grad():
        ours.router.proj.weight.copy_(hf.gate.weight)
        _copy_experts(ours, hf.experts.gate_up_proj, hf.experts.down_proj)
        x = torch.randn(3, 5, D)
        assert torch.allclose(ours(x), hf(x), atol=1e-5)


@pytest.mark.parametrize("norm_topk_prob", [False, True])
def test_equals_qwen2_moe_block(norm_topk_prob):
    hf = Qwen2MoeSparseMoeBlock(Qwen2MoeConfig(
        hidden_size=D, moe_intermediate_size=F, shared_expert_intermediate_size=2 * F, num_experts=E,
        num_experts_per_tok=2, norm_topk_prob=norm_topk_prob)).eval()
    _perturb(hf)
    router = "softmax_topk_norm" if norm_topk_prob else "softmax_topk"
    ours = _zoo(top_k=2, router=router, n_shared_experts=2, shared_gate=True).eval()
    with torch.no_grad():
        ours.router.proj.weight.copy_(hf.gate.weight)
        _copy_experts(ours, hf.experts.gate_up_proj, hf.experts.down_proj)
        sh = hf.shared_expert
        ours.shared.up.weight.copy_(torch.cat([sh.gate_proj.weight, sh.up_proj.weight]))
        ours.shared.down.weight.copy_(sh.down_proj.weight)
        ours.shared_gate.weight.copy_(hf.shared_expert_gate.weight)
        x = torch.randn(3, 5, D)
        assert torch.allclose(ours(x), hf(x), atol=1e-5)


def test_gradients_equal_mixtral_block():
    hf = MixtralSparseMoeBlock(MixtralConfig(hidden_size=D, intermediate_size=F, num_local_experts=E,
                                             num_experts_per_tok=2))
    _perturb(hf)
    ours = _zoo(top_k=2, balance={})
    with torch.no_grad():
        ours.router.proj.weight.copy_(hf.gate.weight)
        _copy_experts(ours, hf.experts.gate_up_proj, hf.experts.down_proj)
    x = torch.randn(2, 6, D)
    g = torch.randn(2, 6, D)
    ours(x).backward(g)
    hf(x.clone()).backward(g)
    assert torch.allclose(ours.router.proj.weight.grad, hf.gate.weight.grad, atol=1e-5)
    got = torch.stack([e.up.weight.grad for e in ours.experts])
    assert torch.allclose(got, hf.experts.gate_up_proj.grad, atol=1e-5)


@pytest.mark.parametrize("family", ["qwen2_moe", "qwen3_moe", "olmoe"])
def test_softmax_routers_route_in_the_model_dtype_as_transformers_does(family):
    """transformers' Qwen2-MoE, Qwen3-MoE and OLMoE routers take bf16 logits from a bf16 gate in a bf16 model
    (then a float32 softmax): zoo's softmax_topk with its default float32=false chooses their experts for
    every one of 4,096 bf16 tokens (64 experts, top-8, init-sized gate); float32=true (DeepSeek-V2's way)
    would choose others for some."""
    from transformers import OlmoeConfig, Qwen3MoeConfig
    from transformers.models.olmoe.modeling_olmoe import OlmoeTopKRouter
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeTopKRouter
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    from zoo.modules.ffn_settings import FFN
    from zoo.modules.moe import ROUTERS

    d, e = 128, 64
    router_class, config_class = {"qwen2_moe": (Qwen2MoeTopKRouter, Qwen2MoeConfig),
                                  "qwen3_moe": (Qwen3MoeTopKRouter, Qwen3MoeConfig),
                                  "olmoe": (OlmoeTopKRouter, OlmoeConfig)}[family]
    hf = router_class(config_class(hidden_size=d, num_experts=e, num_experts_per_tok=8, norm_topk_prob=False))
    torch.manual_seed(0)
    with torch.no_grad():
        hf.weight.normal_(0, 0.02)
    x = torch.randn(4096, d).bfloat16()  # a bf16 model's hidden states
    differ = {}
    for float32 in (False, True):
        router = {"name": "softmax_topk"} if not float32 else {"name": "softmax_topk", "float32": True}
        ours = ROUTERS.get("softmax_topk")(d, FFN.parse({"name": "moe", "n_experts": e, "top_k": 8,
                                                         "router": router}))
        with torch.no_grad():
            ours.proj.weight.copy_(hf.weight)
            _, _, want = hf.to(torch.bfloat16)(x)
            got = ours.to(torch.bfloat16)(x).experts
        differ[float32] = int((got.sort(dim=-1).values != want.sort(dim=-1).values).any(dim=-1).sum())
    assert differ[False] == 0 and differ[True] > 0
