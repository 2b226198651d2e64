"""Routers (`model.ffn.router`, settings in zoo.modules.ffn_settings): which top_k experts each token goes
to and with which weights.

- `softmax_topk`: p = softmax(logits), keep the top_k p as they are (Qwen's norm_topk_prob=false, OLMoE);
- `softmax_topk_norm`: the same, the kept p renormalised to sum to 1 (Qwen's norm_topk_prob=true);
- `topk_softmax`: the top_k logits, then a softmax over them (Mixtral; equal to softmax_topk_norm in exact
  arithmetic);
- `sigmoid_bias`: s = sigmoid(logits); experts chosen by s + b, weighted by s renormalised over the chosen;
  the per-expert bias b follows the load outside the gradient (DeepSeek-V3's auxiliary-loss-free balancing:
  after each step b_i += bias_rate * sign(mean load - load_i), `model.ffn.router.bias_rate`); with
  `n_group` > 1 only the best `topk_group` groups of experts compete, a group scored by the sum of its top 2
  biased scores (DeepSeek-V3); `norm_topk_prob: false` keeps the chosen scores as they are;
- `group_limited_greedy`: p = softmax(logits); groups scored by their largest p, the top_k p among the best
  `topk_group` groups kept as they are (DeepSeek-V2).
Choices are made as DeepSeek's reference code (transformers' DeepseekV3TopkRouter / DeepseekV2TopkRouter)
makes them, the same torch ops on the same float32 scores, so equal scores are broken the same way. A router
with `float32: false` takes its logits in the model's dtype; the softmaxes are float32 (Mixtral, Qwen, OLMoE),
`sigmoid_bias` keeps its scores and weights in that dtype and adds its float32 bias only to choose
(transformers' Lfm2MoeTopKRouter).
Each router also gives the probabilities the balancing loss averages (P_i) and its raw logits (z-loss)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from zoo.modules.ffn_settings import MoESettings
from zoo.registry import Registry


@dataclass
class Routing:
    """The routing of N tokens: `experts` (N, k) long, `weights` (N, k), `probs` (N, E) float32, the router's
    probability per expert (averaged by the balancing loss), `logits` (N, E) float32."""

    experts: torch.Tensor
    weights: torch.Tensor
    probs: torch.Tensor
    logits: torch.Tensor


ROUTERS: Registry = Registry("router", key="model.ffn.router")  # names: zoo.modules.ffn_settings.ROUTER


class Router(nn.Module):
    """A linear map to one logit per expert (biased with `router_bias`, gpt-oss), and the choice rule a
    subclass says in `route`."""

    follows_load = False  # True: `update` reads the load, so the training loop sums it over processes

    def __init__(self, d_model: int, settings: MoESettings) -> None:
        super().__init__()
        # True (`model.ffn.router.float32`): routes in float32 in a bf16 / fp16 model, as DeepSeek does
        # (transformers loads mlp.gate and the correction bias float32 into a bf16 model): the weights and
        # buffers stay float32 when the model is cast down, and the logits are a float32 matmul, autocast or
        # not. False: the logits are the model dtype's.
        self.float32 = settings.router.float32
        self.proj = nn.Linear(d_model, settings.n_experts, bias=settings.router_bias)
        self.top_k, self.scale = settings.top_k, settings.route_scale

    def _keeps_float32(self, t: torch.Tensor) -> bool:
        """Whether `t` stays float32 when the model is cast down: every tensor of a float32 router."""
        return self.float32

    def _apply(self, fn, recurse: bool = True):
        """The tensors `_keeps_float32` names follow a cast's device, never a cast down to a 16-bit float."""

        def keep_float32(t: torch.Tensor) -> torch.Tensor:
            target = fn(t.new_empty(0))  # where and as what the cast puts a tensor like t
            if t.dtype == torch.float32 and target.dtype in (torch.bfloat16, torch.float16) \
                    and self._keeps_float32(t):
                return t.to(target.device)
            return fn(t)

        return super()._apply(keep_float32, recurse)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, C) -> (N, E) logits in the dtype the router computes in: float32 for a float32 router, else
        the model's (autocast's)."""
        if not self.float32:
            return self.proj(x)
        with torch.autocast(x.device.type, enabled=False):
            if type(self.proj) is not nn.Linear:  # quantised (zoo.quantize): its own layer, on float32 inputs
                return self.proj(x.float()).float()
            bias = None if self.proj.bias is None else self.proj.bias.float()
            return nn.functional.linear(x.float(), self.proj.weight.float(), bias)

    def forward(self, x: torch.Tensor) -> Routing:
        """x (N, C) -> Routing; probabilities and logits in float32, weights in x's dtype (scaled in the dtype
        the route gave them)."""
        routing = self.route(self.logits(x))  # (N, E)
        if self.scale != 1.0:
            routing.weights = routing.weights * self.scale
        routing.weights = routing.weights.to(x.dtype)
        return routing

    def route(self, logits: torch.Tensor) -> Routing:
        """logits (N, E) as `logits` computed them -> Routing."""
        raise NotImplementedError

    def update(self, load: torch.Tensor) -> None:
        """After an optimizer step, with the tokens each expert took since the last one (E,): most routers
        learn only from the gradient and do nothing here."""


@ROUTERS.register("softmax_topk")
class SoftmaxTopK(Router):
    renormalise = False

    def route(self, logits: torch.Tensor) -> Routing:
        logits = logits.float()
        probs = logits.softmax(dim=-1)  # (N, E)
        weights, experts = probs.topk(self.top_k, dim=-1)  # (N, k)
        if self.renormalise:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return Routing(experts, weights, probs, logits)


@ROUTERS.register("softmax_topk_norm")
class SoftmaxTopKNorm(SoftmaxTopK):
    renormalise = True


@ROUTERS.register("topk_softmax")
class TopKSoftmax(Router):
    def route(self, logits: torch.Tensor) -> Routing:
        logits = logits.float()
        top, experts = logits.topk(self.top_k, dim=-1)  # (N, k)
        return Routing(experts, top.softmax(dim=-1), logits.softmax(dim=-1), logits)


def keep_groups(choice: torch.Tensor, n_group: int, topk_group: int,
                group_score: Callable[[torch.Tensor], torch.Tensor], fill: float) -> torch.Tensor:
    """choice (N, E) with the experts outside each token's best `topk_group` of `n_group` equal groups set to
    `fill`; `group_score` maps (N, G, E/G) to the groups' scores (N, G)."""
    n, n_experts = choice.shape
    scores = group_score(choice.view(n, n_group, n_experts // n_group))  # (N, G)
    kept = torch.zeros_like(scores).scatter_(1, scores.topk(topk_group, dim=-1, sorted=False).indices, 1)
    mask = kept.bool().unsqueeze(-1).expand(n, n_group, n_experts // n_group).reshape(n, n_experts)
    return choice.masked_fill(~mask, fill)


def top_choices(choice: torch.Tensor, k: int) -> torch.Tensor:
    """The k experts with the largest `choice` (N, k), best first (the dispatch's capacity priority); the set
    is torch.topk's, as the reference takes it, ties included."""
    experts = choice.topk(k, dim=-1, sorted=False).indices  # (N, k) in no order
    order = choice.gather(-1, experts).argsort(dim=-1, descending=True, stable=True)
    return experts.gather(-1, order)


@ROUTERS.register("group_limited_greedy")
class GroupLimitedGreedy(Router):
    """DeepSeek-V2: softmax probabilities; a token keeps the topk_group groups with the largest single
    probability and takes the top_k probabilities among their experts, unnormalised."""

    def __init__(self, d_model: int, settings: MoESettings) -> None:
        super().__init__(d_model, settings)
        self.n_group, self.topk_group = settings.router.n_group, settings.router.topk_group

    def route(self, logits: torch.Tensor) -> Routing:
        logits = logits.float()
        probs = logits.softmax(dim=-1)  # (N, E)
        choice = probs
        if self.n_group > 1:  # masked experts at 0: below every kept probability
            choice = keep_groups(probs, self.n_group, self.topk_group, lambda g: g.max(dim=-1).values, 0.0)
        experts = top_choices(choice, self.top_k)
        return Routing(experts, choice.gather(-1, experts), probs, logits)


@ROUTERS.register("sigmoid_bias")
class SigmoidBias(Router):
    """DeepSeek-V3: the bias steers which experts are chosen, never the weights, and is no parameter: it moves
    by `bias_rate` against each expert's load (Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing"). With
    groups, a group's score is the sum of its two best biased scores. The bias stays float32 in every dtype
    (as transformers keeps DeepSeek-V3's and LFM2-MoE's, and so that bias_rate steps are not rounded away);
    with `float32: false` the scores and weights are in the model's dtype and only the choice adds the float32
    bias (LFM2-MoE)."""

    follows_load = True

    def __init__(self, d_model: int, settings: MoESettings) -> None:
        super().__init__(d_model, settings)
        router = settings.router
        self.rate, self.normalise = router.bias_rate, router.norm_topk_prob
        self.n_group, self.topk_group = router.n_group, router.topk_group
        self.renorm_eps = router.renorm_eps
        self.register_buffer("bias", torch.zeros(settings.n_experts))  # saved with the model, no gradient

    def _keeps_float32(self, t: torch.Tensor) -> bool:
        """The bias stays float32 in every dtype; the rest as the router's `float32` says."""
        return self.float32 or t is self.bias

    def route(self, logits: torch.Tensor) -> Routing:
        scores = logits.sigmoid()  # (N, E) in the logits' dtype
        choice = scores + self.bias  # chosen with the bias, in float32
        if self.n_group > 1:
            choice = keep_groups(choice, self.n_group, self.topk_group,
                                 lambda g: g.topk(2, dim=-1).values.sum(dim=-1), float("-inf"))
        experts = top_choices(choice, self.top_k)  # (N, k)
        weights = scores.gather(-1, experts)  # weighted without it, in the scores' dtype
        if self.normalise:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + self.renorm_eps)
        probs = scores.float()
        return Routing(experts, weights, probs / probs.sum(dim=-1, keepdim=True), logits.float())

    @torch.no_grad()
    def update(self, load: torch.Tensor) -> None:
        """b_i += rate * sign(mean load - load_i): an overloaded expert's bias falls, an idle one's rises."""
        load = load.to(self.bias.dtype)
        self.bias += self.rate * torch.sign(load.mean() - load)
