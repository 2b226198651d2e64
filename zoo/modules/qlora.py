"""QLoRA (Dettmers et al. 2023) as a layer: LoRA on a frozen base weight held in 4-bit NormalFloat (NF4),
quantised with bitsandbytes in blocks of `block_size` weights along each row, one fp32 absmax per block
(4.5 bits a weight; no double quantisation of the absmax). Each matmul dequantises the base (bitsandbytes'
`matmul_4bit`, whose backward dequantises again instead of keeping the float weight); the adapters are
full-precision parameters in the model's dtype. Merging dequantises the base to fp32 and adds
(alpha / r) B A: a plain float layer (fp32 for an fp32 model).

The base is two plain buffers (`weight_nf4`: two codes a byte; `weight_absmax`), so a checkpoint holds the
4-bit base itself, and a meta-device copy has their shapes without bitsandbytes. Core floor, beside LoRA,
so the checkpoint format can rebuild the layers (zoo.modules.adapters) and zoo.load merge them."""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.modules.lora import LoRALinear

BLOCK_SIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # bitsandbytes' quantize_4bit blocksize
INSTALL = "pip install 'zoo[qlora]' (bitsandbytes)"


def bitsandbytes() -> Any:
    """The bitsandbytes module; ValueError naming the package and how to install it when it is missing."""
    try:
        with _hub_offline():
            return importlib.import_module("bitsandbytes")
    except ImportError as e:
        raise ValueError(f"finetune=qlora quantises the base with bitsandbytes, which cannot be imported "
                         f"({e}): {INSTALL}") from None


@contextlib.contextmanager
def _hub_offline():
    """The Hugging Face Hub offline while bitsandbytes imports: its CPU backend asks the Hub for a kernel
    (through the `kernels` package transformers installs), and without network that request waited 10
    minutes here before falling back to bitsandbytes' own kernel. zoo downloads nothing at run time, so the
    fallback is taken at once (about 4 s); the Hub's setting is restored after."""
    constants = sys.modules.get("huggingface_hub.constants")
    held_env, held = os.environ.get("HF_HUB_OFFLINE"), getattr(constants, "HF_HUB_OFFLINE", None)
    os.environ["HF_HUB_OFFLINE"] = "1"
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if held_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = held_env
        if constants is not None:
            constants.HF_HUB_OFFLINE = held


def nf4_refusal(layer: nn.Linear, block_size: int) -> str | None:
    """Why `layer` cannot be held in NF4 blocks of `block_size` (None when it can): a block must lie within
    one row, so it divides the input features."""
    if layer.in_features % block_size:
        return (f"finetune.block_size={block_size} does not divide its {layer.in_features} input features "
                f"(block sizes allowed: {', '.join(str(b) for b in BLOCK_SIZES if b <= layer.in_features)})")
    return None


class QLoRALinear(LoRALinear):
    """A LoRALinear whose base weight is stored in NF4 (`weight_nf4`, `weight_absmax`); `weight` is the fp32
    matrix it dequantises to (a read-only view for merging and folding, not a parameter)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float, *, block_size: int) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features, self.block_size = base.in_features, base.out_features, block_size
        device, n = base.weight.device, base.in_features * base.out_features
        if device.type == "meta":  # shapes only (checkpoint checks, config checks)
            packed = torch.empty(n // 2, 1, dtype=torch.uint8, device=device)
            absmax = torch.empty(n // block_size, device=device)
        else:
            packed, state = bitsandbytes().functional.quantize_4bit(
                base.weight.detach().float(), blocksize=block_size, quant_type="nf4")
            absmax = state.absmax
        self.register_buffer("weight_nf4", packed)  # (N K / 2, 1): two codes a byte
        self.register_buffer("weight_absmax", absmax)  # (N K / block_size,)
        self.bias = base.bias
        kind = {"device": device, "dtype": torch.float32 if device.type == "meta" else base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(rank, self.in_features, **kind))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as LoRALinear
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, **kind))
        self.scaling = alpha / rank
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def quant_state(self) -> Any:
        """bitsandbytes' QuantState of the stored base (built per call: it follows the buffers' device)."""
        functional = bitsandbytes().functional
        return functional.QuantState(absmax=self.weight_absmax, shape=torch.Size((self.out_features,
                                     self.in_features)), code=functional.get_4bit_type("nf4", device=
                                     self.weight_absmax.device), blocksize=self.block_size, quant_type="nf4",
                                     dtype=torch.float32)

    @property
    def weight(self) -> torch.Tensor:
        """The (out, in) fp32 base weight the NF4 codes stand for."""
        return bitsandbytes().functional.dequantize_4bit(self.weight_nf4, self.quant_state())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = bitsandbytes().matmul_4bit(x, self.weight_nf4, self.quant_state(), bias=self.bias)
        update = F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B)  # (..., r) -> (..., out)
        return base + self.scaling * update

    def split_rows(self, sizes: dict[str, int]) -> dict[str, LoRALinear]:
        raise ValueError("finetune=qlora keeps fused layers whole: its 4-bit base cannot be split by rows "
                         "(tensor parallel); use finetune=lora there")

    def merged(self) -> nn.Linear:
        """A plain nn.Linear with dequant(W) + (alpha / r) B A, summed in fp32 and stored in the adapters'
        dtype (the model's: fp32 unless it was built in another)."""
        plain = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                          device=self.weight_nf4.device, dtype=self.lora_A.dtype)
        with torch.no_grad():
            plain.weight.copy_(self.weight + self.scaling * (self.lora_B.float() @ self.lora_A.float()))
        if self.bias is not None:
            plain.bias = self.bias
        return plain

    def base_record(self) -> dict[str, Any]:
        return {"quantized": "nf4", "block_size": self.block_size}

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, nf4 base "
                f"(block_size={self.block_size}), rank={self.lora_A.shape[0]}, scaling={self.scaling:g}")
