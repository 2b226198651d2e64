"""The keys of `model.ffn`, the feed-forward sub-layer of every layer (zoo.modules.feedforward.FFNS builds
it): `mlp` (a dense FFN), `none`, and `moe` (a Mixture of Experts) with its router nested inside it:

    ffn: {name: moe, n_experts: 64, top_k: 8, router: softmax_topk, balance: {aux: 0.08, z: 0.001}}
    ffn: {name: moe, router: {name: sigmoid_bias, bias_rate: 0.001}, balance: {}}
    ffn: {name: moe, n_experts: 256, top_k: 8, route_scale: 2.5, balance: {},
          router: {name: sigmoid_bias, n_group: 8, topk_group: 4}}          # DeepSeek-V3

The FFN's width and activation stay on the spine (`model.d_ff` / `ffn_ratio`, `model.activation`): the dense
FFN, every expert and the dense layers of a MoE model read them, as transformers' configs keep them on top.
Which layers are MoE is `model.layer_pattern` (tags moe | dense). Pure data (no torch); what the keys say with
the rest of the config is checked by the FFN kind's `check_config`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

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


@dataclass(frozen=True)
class RouterSettings(Part):
    """Base of a router's settings: `check` says what its keys need of the MoE's (n_experts, top_k)."""

    float32: bool = False  # routes in float32 in a bf16 / fp16 model: the router's weights stay float32 and
    #                        its logits are a float32 matmul (DeepSeek's routers in transformers); false:
    #                        the logits in the model's dtype, the softmax in float32 (Mixtral, Qwen, OLMoE),
    #                        sigmoid_bias's scores and weights in the model's dtype (LFM2-MoE)

    def check(self, moe: MoESettings) -> None:
        """Raise ValueError naming the key when this router cannot route `moe`'s experts (before a build)."""


@ROUTER.register("softmax_topk")
@dataclass(frozen=True)
class SoftmaxTopK(RouterSettings):
    """p = softmax(logits), the top_k p kept as they are (Qwen's norm_topk_prob=false, OLMoE)."""


@ROUTER.register("softmax_topk_norm")
@dataclass(frozen=True)
class SoftmaxTopKNorm(RouterSettings):
    """The same, the kept p renormalised to sum to 1 (Qwen's norm_topk_prob=true)."""


@ROUTER.register("topk_softmax")
@dataclass(frozen=True)
class TopKSoftmax(RouterSettings):
    """The top_k logits, then a softmax over them (Mixtral, gpt-oss)."""


@dataclass(frozen=True)
class GroupLimited(RouterSettings):
    """Group-limited routing (DeepSeek): the experts split into n_group equal groups, each token keeps the
    best topk_group groups and picks its top_k experts among theirs. n_group 1: no limit."""

    n_group: Annotated[int, integer(1)] = 1  # equal groups of experts (transformers' n_group)
    topk_group: Annotated[int, integer(1)] = 1  # groups each token keeps (transformers' topk_group)
    min_group_size: ClassVar[int] = 1  # experts a group needs for the group score

    def check(self, moe: MoESettings) -> None:
        where = "model.ffn.router"
        if moe.n_experts % self.n_group:
            raise ValueError(f"{where}.n_group={self.n_group} does not divide model.ffn.n_experts="
                             f"{moe.n_experts}; the experts are split into n_group equal groups.")
        if self.topk_group > self.n_group:
            raise ValueError(f"{where}.topk_group={self.topk_group} exceeds {where}.n_group={self.n_group}; "
                             "each token keeps the best topk_group of the n_group groups.")
        size = moe.n_experts // self.n_group
        if self.n_group > 1 and size < self.min_group_size:
            raise ValueError(f"{where}.n_group={self.n_group} leaves {size} expert per group of model.ffn."
                             f"n_experts={moe.n_experts}; {self.name} scores a group by the sum of its top "
                             f"{self.min_group_size} experts, so n_experts / n_group must be >= "
                             f"{self.min_group_size}.")
        if moe.top_k > self.topk_group * size:
            raise ValueError(f"model.ffn.top_k={moe.top_k} exceeds the {self.topk_group * size} experts the "
                             f"kept groups hold ({where}.topk_group={self.topk_group} of n_group="
                             f"{self.n_group} groups of {size}); raise topk_group or lower top_k.")


@ROUTER.register("group_limited_greedy")
@dataclass(frozen=True)
class GroupLimitedGreedy(GroupLimited):
    """p = softmax(logits); groups scored by their largest p, top_k p kept among the best topk_group groups,
    unnormalised (DeepSeek-V2's topk_method=group_limited_greedy)."""

    float32: bool = True  # as transformers' DeepseekV2TopkRouter


@ROUTER.register("sigmoid_bias")
@dataclass(frozen=True)
class SigmoidBias(GroupLimited):
    """Sigmoid scores; experts chosen by score + a load-following bias, weighted without it (DeepSeek-V3's
    noaux_tc: groups scored by the sum of their top 2 biased scores)."""

    float32: bool = True  # as transformers' DeepseekV3TopkRouter
    bias_rate: Annotated[float, number(0)] = 0.001  # the bias step per optimizer update (gamma)
    norm_topk_prob: bool = True  # the kept scores renormalised to sum to 1 (transformers' norm_topk_prob)
    renorm_eps: Annotated[float, number(0)] = 1e-20  # added to the kept scores' sum before dividing by it
    #                                                  (DeepSeek-V3's 1e-20; LFM2-MoE's 1e-6)
    min_group_size: ClassVar[int] = 2


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
