"""Rebuilding a fine-tuning run's adapters from the record a checkpoint saved (zoo.modules.lora.lora_record):
LoRA layers on a float base, or on a 4-bit one (`quantized: nf4`, zoo.modules.qlora), before the weights
load. Core floor, so the checkpoint format and zoo.load can do it."""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.modules.lora import LoRALinear, adapt
from zoo.modules.qlora import QLoRALinear

ADAPTER_KEYS = ("paths", "rank", "alpha", "dropout", "quantized")  # the rest configures the base (block_size)
LAYERS: dict[str | None, type[LoRALinear]] = {None: LoRALinear, "nf4": QLoRALinear}  # record's `quantized`


def restore_lora(model: nn.Module, record: Any, where: str) -> None:
    """Adapters from a `lora_record` (ValueError naming `where` for a record that does not fit the model)."""
    try:
        base = {k: v for k, v in record.items() if k not in ADAPTER_KEYS}
        quantized = record.get("quantized")
        if quantized not in LAYERS:
            raise ValueError(f"quantized={quantized!r} is not one of {', '.join(k for k in LAYERS if k)}")
        adapt(model, list(record["paths"]), rank=int(record["rank"]), alpha=float(record["alpha"]),
              dropout=float(record["dropout"]), layer=LAYERS[quantized], **base)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"{where}: the LoRA record {record!r} does not fit the model "
                         f"({type(e).__name__}: {e})") from None
