"""The Mixture-of-Experts FFN sub-layer (`model.ffn: {name: moe, ...}`, zoo.modules.ffn_settings): a
router, n_experts gated or plain FFNs of width expert_d_ff, optional always-on shared experts, balancing
losses. Each forward leaves its statistics in `layer.last` (load per expert, losses, dropped assignments) for
the training loop (zoo.modules.moe.steps), which adds the load to `pending_load` (a buffer outside
checkpoints) until the router's next update."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from zoo.modules.feedforward import FFNS, FeedForward, FFNKind
from zoo.modules.ffn_settings import MoESettings
from zoo.modules.moe.balance import BALANCES
from zoo.modules.moe.dispatch import dispatch
from zoo.modules.moe.routers import ROUTERS
from zoo.registry import unknown_choice_message


@dataclass
class MoEStats:
    """One forward's routing: `load` (E,) assignments per expert before any drop, `losses` name -> scaled
    balancing loss (with its gradient), `dropped` assignments the capacity dropped, `tokens` routed, and
    which experts each token went to with which weights (`experts`, `weights` (N, top_k), detached: the
    explorer page shows them)."""

    load: torch.Tensor
    losses: dict[str, torch.Tensor] = field(default_factory=dict)
    dropped: torch.Tensor | None = None
    tokens: int = 0
    experts: torch.Tensor | None = None
    weights: torch.Tensor | None = None


class MoE(nn.Module):
    """x (B, T, C) -> sum over the chosen experts of weight * expert(x) [+ shared experts(x)]."""

    def __init__(self, cfg, settings: MoESettings) -> None:
        super().__init__()
        self.settings = settings
        d_ff = settings.expert_d_ff or cfg.ffn_dim
        self.router = ROUTERS.get(settings.router.name)(cfg.d_model, settings)
        self.experts = nn.ModuleList(FeedForward(cfg, d_ff=d_ff) for _ in range(settings.n_experts))
        n_shared = settings.n_shared_experts
        self.shared = FeedForward(cfg, d_ff=n_shared * d_ff) if n_shared else None
        gated = n_shared and settings.shared_gate
        self.shared_gate = nn.Linear(cfg.d_model, 1, bias=False) if gated else None
        self.balances = {name: (BALANCES.get(name), coef) for name, coef in settings.balance.items()}
        self.last: MoEStats | None = None
        # (E,) assignments per expert counted since the router's last update; step state, not a weight
        self.register_buffer("pending_load", torch.zeros(settings.n_experts, dtype=torch.long),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # (N, C)
        routing = self.router(flat)
        # the capacity bounds training only: at inference every token reaches its experts, so a token's output
        # does not depend on what else is in the batch (cached decoding equals the full forward)
        done = dispatch(flat, routing, self.experts, self.settings.capacity_factor if self.training else None)
        out = done.out
        if self.shared is not None:
            shared = self.shared(flat)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(flat)) * shared
            out = out + shared
        losses = {name: coef * loss(routing, done.load) for name, (loss, coef) in self.balances.items()}
        self.last = MoEStats(done.load, losses, done.dropped, flat.shape[0], routing.experts.detach(),
                             routing.weights.detach())
        return out.view_as(x)

    @torch.no_grad()
    def record_load(self, load: torch.Tensor | None = None) -> None:
        """Add the last forward's load (or `load`: every process's, summed) to the count the router's next
        update reads."""
        if load is None and self.last is not None:
            load = self.last.load
        if load is not None:
            self.pending_load += load.to(self.pending_load.device)

    @torch.no_grad()
    def update_router(self) -> None:
        """After an optimizer step: the router follows the load counted since its last update (an empty count
        moves nothing), and the count starts again."""
        self.router.update(self.pending_load)
        self.pending_load.zero_()

    def inactive_parameters(self) -> int:
        """Expert parameters a token does not pass through: (n_experts - top_k) experts' worth."""
        per_expert = sum(p.numel() for p in self.experts[0].parameters())
        return (self.settings.n_experts - self.settings.top_k) * per_expert

    def inactive_matmul_weights(self) -> int:
        """Expert matmul weights a token does not pass through (for FLOPs per token)."""
        per_expert = sum(m.weight.numel() for m in self.experts[0].modules() if isinstance(m, nn.Linear))
        return (self.settings.n_experts - self.settings.top_k) * per_expert


class _MoEKind(FFNKind):
    """ffn=moe: MoE layers where model.layer_pattern says (all when it tags none), dense FFNs elsewhere."""

    def build(self, cfg, index: int) -> nn.Module | None:
        return MoE(cfg, cfg.ffn) if cfg.layer_is_moe(index) else FeedForward(cfg)

    def check_config(self, cfg) -> None:  # what the MoE keys say of each other, of the losses and of depth
        settings: MoESettings = cfg.ffn
        if settings.top_k > settings.n_experts:
            raise ValueError(f"model.ffn.top_k={settings.top_k} exceeds model.ffn.n_experts="
                             f"{settings.n_experts}; each token goes to top_k of the n_experts experts.")
        settings.router.check(settings)  # what the router's keys need of n_experts and top_k (groups)
        for name in settings.balance:
            if name not in BALANCES:
                raise ValueError(f"model.ffn.balance.{name}: "
                                 + unknown_choice_message("balancing loss", name, BALANCES.names()))
        depth = max(cfg.n_encoder_layers, cfg.n_decoder_layers)  # the deeper stack (each counts from 0)
        if not any(map(cfg.layer_is_moe, range(depth))):
            raise ValueError(f"model.layer_pattern={cfg.layer_pattern.to_data()} tags every one of the "
                             f"{depth} layers dense, so ffn=moe would train a dense model; tag some moe, or "
                             "use model.ffn=mlp.")


FFNS.register("moe", _MoEKind())
