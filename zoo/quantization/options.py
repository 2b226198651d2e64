"""The `quantize=...` keys that generate.py and serve.py share: which method, its options, head and tables;
checked before the checkpoint is opened, applied once the model is."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch import nn

from zoo.quantization.api import check_quantize, quantize

OPTION_KEYS = {"quantize_group_size": "group_size", "quantize_symmetric": "symmetric"}  # key -> option


@dataclass
class QuantizeOptions:
    """Weight-only quantised decoding (zoo.quantize, docs/quantization.md)."""

    quantize: str | None = None  # int8 | int4: quantise the model's weights after loading (null: float)
    quantize_group_size: int | None = None  # int4: weights per scale / zero (32, 64, 128, 256; default 128)
    quantize_symmetric: bool | None = None  # int4: zero fixed at 0 (default: asymmetric)
    quantize_head: bool = True  # the output head too (a large vocabulary makes it a big share of the bytes)
    quantize_embedding: bool = False  # the embedding tables too (memory only: a step looks one row up)

    def quantize_options(self) -> dict[str, Any]:
        return {option: getattr(self, key) for key, option in OPTION_KEYS.items()
                if getattr(self, key) is not None}

    def check_quantize(self, device: str) -> None:
        """Refuse a bad method, an option the method does not read or a bad value, and a CPU-only method on
        another device: one ValueError naming the key, before any file is read."""
        given = [k for k in (*OPTION_KEYS, "quantize_embedding") if getattr(self, k) not in (None, False)]
        if not self.quantize_head:
            given.append("quantize_head")
        if self.quantize is None:
            if given:
                value = getattr(self, given[0])
                shown = str(value).lower() if isinstance(value, bool) else value  # as typed: true / false
                raise ValueError(f"{given[0]}={shown} configures quantize=...; give "
                                 "quantize=int8 or quantize=int4 with it.")
            return
        try:
            entry, _ = check_quantize(self.quantize, {})
        except ValueError as e:
            raise ValueError(f"quantize={self.quantize}: {e}") from None
        reads = {f.name for f in dataclasses.fields(entry.Settings)}
        for key, option in OPTION_KEYS.items():
            if getattr(self, key) is not None and option not in reads:
                takes = ", ".join(k for k, o in OPTION_KEYS.items() if o in reads) or "none"
                raise ValueError(f"{key}= is not read by quantize={self.quantize} (its keys: {takes}).")
        try:
            check_quantize(self.quantize, self.quantize_options())
        except ValueError as e:
            raise ValueError(f"quantize={self.quantize}: {e}") from None
        if entry.cpu_only and device != "cpu":
            raise ValueError(f"quantize={self.quantize} runs on torch's CPU kernel only; device={device} "
                             "cannot run it (use device=cpu, or quantize=int8).")

    def apply_quantize(self, model: nn.Module) -> nn.Module:
        """The model quantised as the keys say (a shape the kernel cannot take: one ValueError naming the
        layer, nothing replaced), or as it is without quantize=."""
        if self.quantize is None:
            return model
        return quantize(model, self.quantize, head=self.quantize_head, embedding=self.quantize_embedding,
                        **self.quantize_options())
