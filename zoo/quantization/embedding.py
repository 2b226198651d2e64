"""A quantised embedding table: a lookup reads a row, so only the rows looked up are dequantised (no kernel is
needed). int8: one scale per row; int4: the int4 layers' groups along the row (zoo.quantization.linear's
rule), two codes a byte. It saves memory, not decoding bandwidth: a step reads one row per token."""

from __future__ import annotations

import torch
from torch import nn

from zoo.quantization.linear import KERNEL_DTYPE, int4_codes


class QuantizedEmbedding(nn.Module):
    """nn.Embedding's lookup over a table stored in `bits` (8 or 4) bits; ``float_weight`` is the (V, D)
    table it looks rows up in, and ``stored`` the names its state dict holds in place of ``weight``."""

    stored = ("codes", "scales", "zeros")

    def __init__(self, table: nn.Embedding, bits: int, group_size: int | None = None,
                 symmetric: bool = True) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = table.num_embeddings, table.embedding_dim
        self.padding_idx, self.bits, self.group_size = table.padding_idx, bits, group_size
        self.dtype = table.weight.dtype
        weight = table.weight.detach().float()  # (V, D)
        if bits == 8:
            scales = (weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0).to(KERNEL_DTYPE)
            self.register_buffer("codes", torch.round(weight / scales.float()).clamp(-127, 127)
                                 .to(torch.int8))
            self.register_buffer("scales", scales)  # (V, 1)
            self.register_buffer("zeros", torch.zeros_like(scales))
        else:
            codes, scales, zeros = int4_codes(weight, group_size, symmetric)  # (V, D), (V, G), (V, G)
            self.register_buffer("codes", (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8))
            self.register_buffer("scales", scales)
            self.register_buffer("zeros", zeros)

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The float rows (..., D) of `ids`."""
        codes = self.codes[ids]  # (..., D) int8 or (..., D / 2) uint8
        scales, zeros = self.scales[ids].float(), self.zeros[ids].float()  # (..., 1 | G)
        if self.bits == 8:
            return (codes.float() * scales).to(self.dtype)
        values = torch.stack([codes & 15, codes >> 4], dim=-1).flatten(-2).float() - 8  # (..., D)
        groups = values.unflatten(-1, (-1, self.group_size))  # (..., G, g)
        return (groups * scales[..., None] + zeros[..., None]).flatten(-2).to(self.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self._rows(ids)

    def float_weight(self) -> torch.Tensor:
        return self._rows(torch.arange(self.num_embeddings, device=self.codes.device)).float()

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.bits == 4 else ""
        return f"{self.num_embeddings}, {self.embedding_dim}, int{self.bits} rows{group}"
