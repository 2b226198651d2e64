"""Mixture-of-Experts (`model.ffn: moe`, keys under `model.moe`): routers and balancing losses as
registries, dropless dispatch with an optional capacity, shared experts, the per-layer pattern; and the
training-loop helpers (balancing losses into the loss, router bias updates, routing statistics)."""

from zoo.modules.moe.balance import BALANCES
from zoo.modules.moe.dispatch import capacity, dispatch
from zoo.modules.moe.layer import MoE, MoEStats, moe_settings
from zoo.modules.moe.routers import ROUTERS, Router, Routing
from zoo.modules.moe.settings import MoESettings
from zoo.modules.moe.steps import auxiliary_loss, moe_layers, record_load, routing_summary, update_routers

__all__ = ["BALANCES", "ROUTERS", "MoE", "MoESettings", "MoEStats", "Router", "Routing", "auxiliary_loss",
           "capacity", "dispatch", "moe_layers", "moe_settings", "record_load", "routing_summary",
           "update_routers"]
