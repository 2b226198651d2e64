"""FP8 block-quantised weights (transformers' `quant_method: fp8`, DeepSeek-V3's checkpoints): a matrix W
(rows, cols) is stored as `X.weight` in float8 (E4M3) and `X.weight_scale_inv` (ceil(rows / b0),
ceil(cols / b1)) float32, one multiplier per `weight_block_size` [b0, b1] block (128 x 128 on the Hub; the
last block of a side may be partial, as DeepSeek-V3's 576-row kv_a_proj_with_mqa). zoo dequantizes them on
load, W = q * scale per block, and keeps no FP8 layer; an export writes plain tensors without
quantization_config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

SCALE = "weight_scale_inv"  # the per-block multiplier beside each quantized `weight`
FP8_DTYPES = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name))


def fp8_block(hf: Mapping[str, Any]) -> tuple[int, int] | None:
    """The block size of config.json `hf`'s FP8 quantization (None: not FP8); one error naming the key when
    its `quantization_config` says FP8 in a way zoo cannot read."""
    quant = hf.get("quantization_config")
    if not isinstance(quant, Mapping) or quant.get("quant_method") != "fp8":
        return None
    block = quant.get("weight_block_size", [128, 128])
    if not (isinstance(block, (list, tuple)) and len(block) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ValueError(f"config.json quantization_config.weight_block_size={block!r}: zoo reads FP8 "
                         "weights quantized in blocks of two positive integers (rows, columns), e.g. "
                         "[128, 128].")
    if quant.get("fmt", "e4m3") != "e4m3":
        raise ValueError(f"config.json quantization_config.fmt={quant.get('fmt')!r}: zoo reads FP8 "
                         "weights in e4m3 only.")
    return int(block[0]), int(block[1])


def is_quantization_tensor(name: str, tensor: torch.Tensor) -> bool:
    """An FP8 weight or its scale (left out when asking which dtype a file holds its weights in)."""
    return name.endswith(SCALE) or tensor.dtype in FP8_DTYPES


def dequantize(weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """weight (rows, cols) FP8 and scale (ceil(rows / b0), ceil(cols / b1)) -> float32 (rows, cols)."""
    rows, cols = weight.shape
    want = (-(-rows // block[0]), -(-cols // block[1]))
    if tuple(scale.shape) != want:
        raise ValueError(f"an FP8 weight of shape {(rows, cols)} in blocks of {list(block)} has "
                         f"{want[0]} x {want[1]} scales, not {tuple(scale.shape)}.")
    grid = scale.float().repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:rows, :cols]
    return weight.float() * grid  # (rows, cols)


def dequantized(tensors: Mapping[str, torch.Tensor], block: tuple[int, int]) -> dict[str, torch.Tensor]:
    """The file's tensors with each `X.weight` that has an `X.weight_scale_inv` dequantized (the scales
    dropped); a scale without its weight is named."""
    out = dict(tensors)
    for name in [n for n in tensors if n.endswith(SCALE)]:
        weight = name[: -len(SCALE)] + "weight"
        if weight not in tensors:
            raise ValueError(f"FP8 scale {name!r} has no weight {weight!r} beside it.")
        out[weight] = dequantize(tensors[weight], out.pop(name), block)
    return out
