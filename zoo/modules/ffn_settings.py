"""The keys of `model.ffn`, the feed-forward sub-layer of every layer (zoo.modules.feedforward.FFNS builds
it): `mlp` (a dense FFN), `none`, and `moe` (a Mixture of Experts) with its router nested inside it:

    ffn: {name: moe, n_experts: 64, top_k: 8, router: softmax_topk, balance: {aux: 0.08, z: 0.001}}
    ffn: {name: moe, router: {name: sigmoid_bias, bias_rate: 0.001}, balance: {}}

The FFN's width and activation stay on the spine (`model.d_ff` / `ffn_ratio`, `model.activation`): the dense
FFN, every expert and the dense layers of a MoE model read them, as transformers' configs keep them on top.
Which layers are MoE is `model.layer_pattern` (tags moe | dense). Pure data (no torch); what the keys say with
the rest of the config is checked by the FFN kind's `check_config`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from zoo.options import Rule, integer, number, optional
from zoo.parts import Part, Parts

FFN = Parts("ffn", default="mlp")
ROUTER = Parts("ffn.router", default="topk_softmax")  # zoo.modules.moe.routers.ROUTERS builds them


@FFN.register("mlp")
@dataclass(frozen=True)
class MLPSettings(Part):
    """Two linear maps around the activation (gated for swiglu/geglu), d_model -> d_ff -> d_model."""


@FFN.register("none")
@dataclass(frozen=True)
class NoFFNSettings(Part):
    """No FFN sub-layer (attention-only models)."""


@ROUTER.register("softmax_topk")
@dataclass(frozen=True)
class SoftmaxTopK(Part):
    """p = softmax(logits), the top_k p kept as they are (Qwen's norm_topk_prob=false, OLMoE)."""


@ROUTER.register("softmax_topk_norm")
@dataclass(frozen=True)
class SoftmaxTopKNorm(Part):
    """The same, the kept p renormalised to sum to 1 (Qwen's norm_topk_prob=true)."""


@ROUTER.register("topk_softmax")
@dataclass(frozen=True)
class TopKSoftmax(Part):
    """The top_k logits, then a softmax over them (Mixtral, gpt-oss)."""


@ROUTER.register("sigmoid_bias")
@dataclass(frozen=True)
class SigmoidBias(Part):
    """Sigmoid scores; experts chosen by score + a load-following bias, weighted without it (DeepSeek-V3)."""

    bias_rate: Annotated[float, number(0)] = 0.001  # the bias step per optimizer update (gamma)


def _balance_ok(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and k and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
        for k, v in value.items())


_BALANCE = Rule(_balance_ok, "a mapping of balancing loss names (aux, z) to coefficients >= 0 ({} for none)")


@FFN.register("moe")
@dataclass(frozen=True)
class MoESettings(Part):
    """A router sends each token to top_k of n_experts FFNs of width expert_d_ff (zoo.modules.moe)."""

    n_experts: Annotated[int, integer(1)] = 8
    top_k: Annotated[int, integer(1)] = 2  # experts each token goes to
    n_shared_experts: Annotated[int, integer(0)] = 0  # always-on experts (Qwen2-MoE, DeepSeek), one FFN of
    #                                                   width n_shared_experts * expert_d_ff
    shared_gate: bool = False  # shared experts' output times sigmoid(x . w) (Qwen2-MoE)
    expert_d_ff: Annotated[int | None, optional(integer(1))] = None  # each expert's hidden size; null: d_ff
    router: Annotated[Part, ROUTER] = field(default_factory=TopKSoftmax)  # which experts, which weights
    router_bias: bool = False  # the router's linear map has a bias (gpt-oss)
    route_scale: Annotated[float, number(0, low_open=True)] = 1.0  # kept weights multiplied by this
    #                                                                (DeepSeek-V3's routed_scaling_factor)
    balance: Annotated[Mapping[str, float], _BALANCE] = field(default_factory=lambda: {"aux": 0.01})
    #   balancing loss -> its coefficient, added to the training loss (zoo.modules.moe.balance.BALANCES)
    capacity_factor: Annotated[float | None, optional(number(0, low_open=True))] = None  # null: dropless;
    #   else in training each expert takes at most ceil(factor * tokens * top_k / n_experts) tokens, the
    #   rest dropped (at inference none is)
