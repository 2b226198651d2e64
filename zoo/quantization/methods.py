"""The quantisation methods (QUANTIZERS): each entry declares the options it reads as a typed settings class,
says which layers it cannot take (the kernel's shape rules) and builds the quantised layers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch import nn

from zoo.quantization.embedding import QuantizedEmbedding
from zoo.quantization.linear import (
    INT4_GROUP_SIZES,
    INT4_N_MULTIPLE,
    INT8_K_MULTIPLE,
    Int4Linear,
    Int8Linear,
    QuantizedLinear,
)
from zoo.registry import Registry


class QuantizationMethod:
    """One entry of QUANTIZERS. `Settings` is the dataclass of the options it reads (all defaulted);
    `cpu_only`: its layers run on a CPU kernel only."""

    name: str
    Settings: type
    cpu_only = False

    def settings(self, options: dict[str, Any]) -> Any:
        """`options` (keyword arguments of zoo.quantize, `quantize_*` keys of the apps) -> Settings; a key the
        method does not read, or a bad value, is one ValueError naming it and what is allowed."""
        known = [f.name for f in dataclasses.fields(self.Settings)]
        for key, value in options.items():
            if key not in known:
                allowed = ", ".join(known) if known else "none"
                raise ValueError(f"quantization method {self.name!r} has no option {key!r}; its options: "
                                 f"{allowed}.")
            want = self.Settings.__dataclass_fields__[key].type
            kind = {"int": int, "bool": bool}[want]
            if type(value) is not kind:
                raise ValueError(f"quantization method {self.name!r}: {key}={value!r} is not "
                                 f"{'an integer' if kind is int else 'true or false'}.")
        settings = self.Settings(**options)
        self.check(settings)
        return settings

    def check(self, settings: Any) -> None:
        """Raise ValueError for settings the method cannot use."""

    def refusal(self, linear: nn.Linear, settings: Any) -> str | None:
        """Why this layer's shape cannot be quantised by the method, or None."""
        return None

    def linear(self, linear: nn.Linear, settings: Any) -> QuantizedLinear:
        raise NotImplementedError

    def embedding(self, table: nn.Embedding, settings: Any) -> QuantizedEmbedding:
        raise NotImplementedError

    def embedding_refusal(self, table: nn.Embedding, settings: Any) -> str | None:
        return None


QUANTIZERS: Registry[QuantizationMethod] = Registry("quantization method")


@dataclass(frozen=True)
class Int8Settings:
    """int8 reads no option: one symmetric scale per output row (per token row for an embedding)."""


class Int8Method(QuantizationMethod):
    name, Settings = "int8", Int8Settings

    def refusal(self, linear: nn.Linear, settings: Int8Settings) -> str | None:
        if linear.in_features % INT8_K_MULTIPLE:
            return (f"in_features {linear.in_features} is not a multiple of {INT8_K_MULTIPLE} (torch's "
                    "_weight_int8pack_mm reads K in vectors of 16 and gives wrong outputs otherwise)")
        return None

    def linear(self, linear: nn.Linear, settings: Int8Settings) -> QuantizedLinear:
        return Int8Linear(linear)

    def embedding(self, table: nn.Embedding, settings: Int8Settings) -> QuantizedEmbedding:
        return QuantizedEmbedding(table, bits=8)


@dataclass(frozen=True)
class Int4Settings:
    """int4: `group_size` weights along K share a bf16 scale and zero (32, 64, 128 or 256: what the kernel
    takes; 128 by default, see docs/quantization.md); `symmetric` fixes the zero at 0 (codes -7..7 times
    the scale) instead of spreading the group's [min, max] over all 16 codes."""

    group_size: int = 128
    symmetric: bool = False


class Int4Method(QuantizationMethod):
    name, Settings, cpu_only = "int4", Int4Settings, True

    def check(self, settings: Int4Settings) -> None:
        if settings.group_size not in INT4_GROUP_SIZES:
            allowed = ", ".join(map(str, INT4_GROUP_SIZES))
            raise ValueError(f"quantization method 'int4': group_size={settings.group_size!r} is not one "
                             f"torch's int4 CPU kernel takes; allowed: {allowed}.")

    def refusal(self, linear: nn.Linear, settings: Int4Settings) -> str | None:
        k, n, g = linear.in_features, linear.out_features, settings.group_size
        if k % g:
            fits = [str(s) for s in INT4_GROUP_SIZES if k % s == 0]
            return (f"in_features {k} is not a multiple of group_size {g} (group sizes that divide it: "
                    f"{', '.join(fits) or 'none of ' + ', '.join(map(str, INT4_GROUP_SIZES))})")
        if n % INT4_N_MULTIPLE:
            return (f"out_features {n} is not a multiple of {INT4_N_MULTIPLE} (torch's int4 CPU kernel packs "
                    "output rows in blocks of 16)")
        return None

    def linear(self, linear: nn.Linear, settings: Int4Settings) -> QuantizedLinear:
        return Int4Linear(linear, settings.group_size, settings.symmetric)

    def embedding_refusal(self, table: nn.Embedding, settings: Int4Settings) -> str | None:
        if table.embedding_dim % settings.group_size:
            return (f"embedding_dim {table.embedding_dim} is not a multiple of group_size "
                    f"{settings.group_size}")
        return None

    def embedding(self, table: nn.Embedding, settings: Int4Settings) -> QuantizedEmbedding:
        return QuantizedEmbedding(table, bits=4, group_size=settings.group_size, symmetric=settings.symmetric)


QUANTIZERS.register("int8", Int8Method())
QUANTIZERS.register("int4", Int4Method())
