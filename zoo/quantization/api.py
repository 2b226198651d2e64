"""`zoo.quantize(model, "int4", group_size=64)`: every layer is checked against the method's kernel rules
first (one error naming the first layer that does not fit, nothing replaced), then replaced in place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from zoo.modules.heads.base import OutputHead
from zoo.quantization.methods import QUANTIZERS, QuantizationMethod


@dataclass
class Replacement:
    """One layer to quantise: where it hangs (`parent.attr`), its dotted name, the layer."""

    parent: nn.Module
    attr: str
    name: str
    layer: nn.Module


def plan(model: nn.Module, method: QuantizationMethod, settings: Any, *, head: bool, embedding: bool
         ) -> list[Replacement]:
    """The layers `quantize` would replace: every nn.Linear (those under the output head only with `head`)
    and, with `embedding`, every nn.Embedding table. Raises ValueError naming the first that the method's
    kernel cannot take."""
    found: list[Replacement] = []

    def walk(module: nn.Module, prefix: str, in_head: bool) -> None:
        for attr, child in module.named_children():
            name = f"{prefix}{attr}"
            under_head = in_head or isinstance(child, OutputHead)
            if type(child) is nn.Linear and (head or not under_head):
                found.append(Replacement(module, attr, name, child))
            elif type(child) is nn.Embedding and embedding:
                found.append(Replacement(module, attr, name, child))
            else:
                walk(child, f"{name}.", under_head)

    walk(model, "", isinstance(model, OutputHead))
    devices = {p.device.type for r in found for p in r.layer.parameters()}
    if method.cpu_only and devices - {"cpu"}:
        elsewhere = ", ".join(sorted(devices - {"cpu"}))
        raise ValueError(f"quantize(model, {method.name!r}): its layers run on torch's CPU kernel only; the "
                         f"model is on {elsewhere}. Quantise it on the CPU and decode there.")
    for r in found:
        linear = type(r.layer) is nn.Linear
        why = method.refusal(r.layer, settings) if linear else method.embedding_refusal(r.layer, settings)
        if why is not None:
            raise ValueError(f"quantize(model, {method.name!r}): layer {r.name} ({_shape(r.layer)}) cannot "
                             f"be quantised: {why}. Keep it float (head=False / embedding=False where it is "
                             f"the head or a table) or use another method ({', '.join(QUANTIZERS.names())}).")
    return found


def _shape(layer: nn.Module) -> str:
    if isinstance(layer, nn.Linear):
        return f"{layer.in_features} -> {layer.out_features}"
    return f"{layer.num_embeddings} x {layer.embedding_dim}"


def check_quantize(method: str, options: dict[str, Any]) -> tuple[QuantizationMethod, Any]:
    """The method's entry and its settings, or one ValueError (unknown method, an option it does not read,
    a bad value): what the apps check before a checkpoint is opened."""
    entry = QUANTIZERS.get(method)
    return entry, entry.settings(options)


def quantize(model: nn.Module, method: str = "int8", *, head: bool = True, embedding: bool = False,
             **options: Any) -> nn.Module:
    """Quantise `model`'s weights in place for inference (eval mode, no training afterwards) and return it.
    `method`: one of QUANTIZERS (int8: per output channel; int4: `group_size` (32, 64, 128, 256; default
    128), `symmetric` (default False)). `head=False` keeps the output head float; `embedding=True` also
    stores the embedding tables quantised (memory, not speed: a step looks one row up). A tied head gets
    its own quantised copy; the embedding keeps the float table unless `embedding=True`."""
    entry, settings = check_quantize(method, options)
    replacements = plan(model, entry, settings, head=head, embedding=embedding)
    if not any(type(r.layer) is nn.Linear for r in replacements):
        raise ValueError(f"quantize(model, {method!r}) found no nn.Linear layer to quantise in "
                         f"{type(model).__name__}" + ("" if head else " outside its head (head=False)") + ".")
    model.eval()
    with torch.no_grad():
        for r in replacements:
            build = entry.linear if type(r.layer) is nn.Linear else entry.embedding
            setattr(r.parent, r.attr, build(r.layer, settings))
    return model


def float_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with each quantised layer's stored tensors replaced by the float ``weight`` it
    computes with (int8: q * scale; int4: (code - 8) * scale + zero), so a quantised model exports as its
    dequantised weights. A model without quantised layers gives its own state dict."""
    state = dict(model.state_dict())
    for name, module in model.named_modules():
        stored = getattr(module, "stored", None)
        if stored and hasattr(module, "float_weight"):
            prefix = f"{name}." if name else ""
            for key in stored:
                state.pop(prefix + key, None)
            state[prefix + "weight"] = module.float_weight().detach()
    return state
