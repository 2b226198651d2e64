"""Routers (`model.ffn.router`, settings in zoo.modules.ffn_settings): which top_k experts each token goes
to and with which weights.

- `softmax_topk`: p = softmax(logits), keep the top_k p as they are (Qwen's norm_topk_prob=false, OLMoE);
- `softmax_topk_norm`: the same, the kept p renormalised to sum to 1 (Qwen's norm_topk_prob=true);
- `topk_softmax`: the top_k logits, then a softmax over them (Mixtral; equal to softmax_topk_norm in exact
  arithmetic);
- `sigmoid_bias`: s = sigmoid(logits); experts chosen by s + b, weighted by s renormalised over the chosen;
  the per-expert bias b follows the load outside the gradient (DeepSeek-V3's auxiliary-loss-free balancing:
  after each step b_i += bias_rate * sign(mean load - load_i), `model.ffn.router.bias_rate`).
Each router also gives the probabilities the balancing loss averages (P_i) and its raw logits (z-loss)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from zoo.modules.ffn_settings import MoESettings
from zoo.registry import Registry


@dataclass
class Routing:
    """The routing of N tokens: `experts` (N, k) long, `weights` (N, k), `probs` (N, E) the router's
    probability per expert (averaged by the balancing loss), `logits` (N, E) float32."""

    experts: torch.Tensor
    weights: torch.Tensor
    probs: torch.Tensor
    logits: torch.Tensor


ROUTERS: Registry = Registry("router", key="model.ffn.router")  # names: zoo.modules.ffn_settings.ROUTER


class Router(nn.Module):
    """A linear map to one logit per expert (biased with `router_bias`, gpt-oss), and the choice rule a
    subclass says in `route`."""

    def __init__(self, d_model: int, settings: MoESettings) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, settings.n_experts, bias=settings.router_bias)
        self.top_k, self.scale = settings.top_k, settings.route_scale

    def forward(self, x: torch.Tensor) -> Routing:
        """x (N, C) -> Routing; probabilities in float32, weights in x's dtype."""
        routing = self.route(self.proj(x).float())  # (N, E)
        if self.scale != 1.0:
            routing.weights = routing.weights * self.scale
        routing.weights = routing.weights.to(x.dtype)
        return routing

    def route(self, logits: torch.Tensor) -> Routing:
        raise NotImplementedError

    def update(self, load: torch.Tensor) -> None:
        """After an optimizer step, with the tokens each expert took since the last one (E,): most routers
        learn only from the gradient and do nothing here."""


@ROUTERS.register("softmax_topk")
class SoftmaxTopK(Router):
    renormalise = False

    def route(self, logits: torch.Tensor) -> Routing:
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
        top, experts = logits.topk(self.top_k, dim=-1)  # (N, k)
        return Routing(experts, top.softmax(dim=-1), logits.softmax(dim=-1), logits)


@ROUTERS.register("sigmoid_bias")
class SigmoidBias(Router):
    """DeepSeek-V3: the bias steers which experts are chosen, never the weights, and is no parameter: it moves
    by `bias_rate` against each expert's load (Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing")."""

    def __init__(self, d_model: int, settings: MoESettings) -> None:
        super().__init__(d_model, settings)
        self.rate = settings.router.bias_rate
        self.register_buffer("bias", torch.zeros(settings.n_experts))  # saved with the model, no gradient

    def route(self, logits: torch.Tensor) -> Routing:
        scores = logits.sigmoid()  # (N, E)
        experts = (scores + self.bias).topk(self.top_k, dim=-1).indices  # (N, k): chosen with the bias
        kept = scores.gather(-1, experts)  # weighted without it
        weights = kept / kept.sum(dim=-1, keepdim=True)
        return Routing(experts, weights, scores / scores.sum(dim=-1, keepdim=True), logits)

    @torch.no_grad()
    def update(self, load: torch.Tensor) -> None:
        """b_i += rate * sign(mean load - load_i): an overloaded expert's bias falls, an idle one's rises."""
        load = load.to(self.bias.dtype)
        self.bias += self.rate * torch.sign(load.mean() - load)
