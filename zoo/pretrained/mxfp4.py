"""MXFP4 (OCP Microscaling, FP4 E2M1 elements with an E8M0 scale per block of 32), as gpt-oss ships its
expert weights: a matrix (..., rows, cols) is stored as `*_blocks` (..., rows, cols / 32, 16) uint8, two
4-bit codes a byte (the low nibble is the even element, the high nibble the odd one), and `*_scales`
(..., rows, cols / 32) uint8, a power of two 2^(s - 127) per block. `unpack` dequantizes (on load, to the
model's float dtype); `pack` quantizes by the OCP spec's rule (tests use it to write a folder in that
layout)."""

from __future__ import annotations

import torch

BLOCK = 32  # elements sharing one scale
BIAS = 127  # E8M0: the scale byte s stands for 2^(s - 127)


def e2m1_values() -> torch.Tensor:
    """The 16 values of the 4-bit codes: sign bit, 2 exponent bits, 1 mantissa bit (exponent 0: subnormal,
    m * 0.5; else 2^(e - 1) * (1 + m / 2)): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives."""
    out = []
    for code in range(16):
        sign, exponent, mantissa = code >> 3, (code >> 1) & 3, code & 1
        magnitude = mantissa * 0.5 if exponent == 0 else 2.0 ** (exponent - 1) * (1 + mantissa / 2)
        out.append(-magnitude if sign else magnitude)
    return torch.tensor(out)


def unpack(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """blocks (..., G, 16) uint8 and scales (..., G) uint8 -> values (..., G * 32) in `dtype`."""
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != BLOCK // 2:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} and scales {tuple(scales.shape)} do not match: "
                         f"blocks are (..., G, {BLOCK // 2}) bytes, scales (..., G).")
    codes = torch.stack([blocks & 0x0F, blocks >> 4], dim=-1).long()  # (..., G, 16, 2): even, odd element
    values = e2m1_values().to(blocks.device)[codes].flatten(-2)  # (..., G, 32)
    exponent = scales.long() - BIAS  # (..., G)
    return torch.ldexp(values, exponent.unsqueeze(-1).float()).flatten(-2).to(dtype)  # (..., G * 32)


def pack(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """values (..., G * 32) -> (blocks (..., G, 16) uint8, scales (..., G) uint8): a block's scale is
    2^(floor(log2(largest magnitude)) - 2) (2 is E2M1's largest exponent), each scaled element rounded to the
    nearest code, saturating at +-6."""
    if values.shape[-1] % BLOCK:
        raise ValueError(f"MXFP4 packs rows of a multiple of {BLOCK} values, got {values.shape[-1]}.")
    x = values.float().unflatten(-1, (-1, BLOCK))  # (..., G, 32)
    largest = x.abs().amax(-1).clamp(min=2.0 ** -BIAS)  # (..., G)
    exponent = (torch.floor(torch.log2(largest)) - 2).clamp(-BIAS, 127)  # (..., G)
    scaled = x / torch.exp2(exponent).unsqueeze(-1)
    grid = e2m1_values()
    codes = (scaled.unsqueeze(-1) - grid).abs().argmin(-1)  # (..., G, 32) the nearest code
    codes = codes.to(torch.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)  # (..., G, 16)
    return blocks, (exponent + BIAS).to(torch.uint8)
