"""Mixture-of-Experts (`model.ffn: {name: moe, ...}`, keys in zoo.modules.ffn_settings.MoESettings): routers
and balancing losses as registries, dropless dispatch with an optional capacity, shared experts, the
per-layer pattern; and the training-loop helpers (balancing losses into the loss, router bias updates, routing
statistics)."""

from zoo.modules.moe.balance import BALANCES
from zoo.modules.moe.dispatch import capacity, dispatch
from zoo.modules.moe.layer import MoE, MoEStats
from zoo.modules.moe.routers import ROUTERS, Router, Routing
from zoo.modules.moe.steps import auxiliary_loss, moe_layers, record_load, routing_summary, update_routers

__all__ = ["BALANCES", "ROUTERS", "MoE", "MoEStats", "Router", "Routing", "auxiliary_loss",
           "capacity", "dispatch", "moe_layers", "record_load", "routing_summary", "update_routers"]
