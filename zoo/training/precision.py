"""Precision by hardware: `auto` is bf16-mixed on GPUs with bf16 units, 16-mixed on older GPUs and 32-true
on CPU (CPUs without bf16 units run bf16 matmuls ~100x slower, so bf16 on CPU is opt-in only)."""

from __future__ import annotations

import torch

# precision -> accelerators it runs on
PRECISIONS: dict[str, tuple[str, ...]] = {
    "32-true": ("cpu", "gpu"),
    "bf16-mixed": ("cpu", "gpu"),
    "16-mixed": ("gpu",),
    "bf16-true": ("cpu", "gpu"),
}


def resolve_accelerator(accelerator: str) -> str:
    """`auto` -> gpu when CUDA is visible, else cpu; `cuda` is treated as `gpu`."""
    if accelerator == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    return "gpu" if accelerator == "cuda" else accelerator


def resolve_precision(precision: str | int, accelerator: str) -> str:
    """Validate `trainer.precision` against the accelerator; `auto` picks the hardware default."""
    accelerator = resolve_accelerator(accelerator)
    precision = str(precision)
    if precision == "auto" and accelerator == "gpu":  # the hardware's default
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    if precision == "auto":
        return "32-true"
    if precision not in PRECISIONS:
        raise ValueError(f"trainer.precision={precision!r} is unknown; allowed: auto, "
                         f"{', '.join(PRECISIONS)}")
    if accelerator not in PRECISIONS[precision]:
        raise ValueError(
            f"trainer.precision={precision} needs a GPU but the accelerator is {accelerator}; "
            f"on CPU use 32-true (or bf16-mixed as a slow correctness check)"
        )
    return precision
