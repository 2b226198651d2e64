"""What a training loop does with a model's MoE layers: add their balancing losses to the loss after each
forward, count the load for the routers that learn from it (sigmoid_bias) and update them once per optimizer
step, and log the routing. zoo's training module calls these; a loop of your own calls them alike:

    loss = task_loss + auxiliary_loss(model); record_load(model); loss.backward(); opt.step()
    update_routers(model)
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.modules.moe.layer import MoE


def moe_layers(model: nn.Module) -> list[tuple[str, MoE]]:
    """(module path, layer) of every MoE layer, in module order."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, MoE)]


def auxiliary_loss(model: nn.Module) -> torch.Tensor | None:
    """The sum of every MoE layer's balancing losses from its last forward (None: no MoE layer or no loss)."""
    losses = [loss for _, layer in moe_layers(model) if layer.last is not None
              for loss in layer.last.losses.values()]
    return torch.stack(losses).sum() if losses else None


def record_load(model: nn.Module) -> None:
    """Add each layer's last load to what its router has seen since the last update (call once per training
    forward: with gradient accumulation the update sees the whole step's tokens). When a router follows the
    load (sigmoid_bias) and several processes train (DDP), the load is summed over them first, one
    all-reduce for all layers, so every process's router moves by the whole batch's load and they agree (DDP
    broadcasts buffers from rank 0 before each forward, which would otherwise leave rank 0's alone)."""
    layers = [layer for _, layer in moe_layers(model) if layer.last is not None]
    if not layers:
        return
    loads = [layer.last.load for layer in layers]
    if any(layer.router.follows_load for layer in layers) and _processes() > 1:
        summed = torch.stack(loads)  # (L, E): one collective for every layer
        torch.distributed.all_reduce(summed)
        loads = list(summed.unbind())
    for layer, load in zip(layers, loads, strict=True):
        layer.record_load(load)


def _processes() -> int:
    """How many processes train together (1 without torch.distributed)."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def update_routers(model: nn.Module) -> None:
    """After an optimizer step: each router updates from the load recorded since the last call
    (sigmoid_bias moves its bias; others do nothing)."""
    for _, layer in moe_layers(model):
        layer.update_router()


def routing_summary(model: nn.Module) -> dict[str, float]:
    """Loggable numbers from each MoE layer's last forward: `<path>/load_<i>` (share of assignments expert i
    took), `<path>/max_over_mean` (load balance: 1 is even), `<path>/dropped` (assignments over capacity),
    and `aux`, `z`... (each balancing loss summed over layers)."""
    out: dict[str, float] = {}
    for path, layer in moe_layers(model):
        if layer.last is None:
            continue
        load = layer.last.load.float()
        share = load / load.sum().clamp(min=1)
        short = path.replace("_stack.layers", "").replace(".ffn", "")  # decoder.3
        out.update({f"{short}/load_{i}": float(v) for i, v in enumerate(share.tolist())})
        out[f"{short}/max_over_mean"] = float(share.max() * share.numel())
        out[f"{short}/dropped"] = float(layer.last.dropped) if layer.last.dropped is not None else 0.0
        for name, loss in layer.last.losses.items():
            out[name] = out.get(name, 0.0) + float(loss.detach())
    return out
