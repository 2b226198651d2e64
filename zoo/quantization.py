"""Post-training quantisation of a model's linear layers for CPU inference: `zoo.quantize(model, "int8")`.

Decoding one token at a time reads every weight once per token, so on a CPU it is bound by memory traffic;
int8 weights move a quarter of the bytes. Methods are a registry (QUANTIZERS); each replaces `nn.Linear`
layers in place. `int8`: weight-only, one symmetric scale per output channel, activations stay float; a
one-row CPU matmul (a decode step) is torch's fused `_weight_int8pack_mm` kernel (the one gpt-fast uses),
anything else converts the int8 weights per call and scales the outputs. Weights take a quarter of the memory;
on CPUs where that kernel is not fast (the 2-core machine in docs/benchmarks.md) decoding is slower than fp32,
so int8 is a memory lever there, not a speed one. (torch.ao's dynamic quantisation is deprecated in torch
2.13.)"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from zoo.registry import Registry

QUANTIZERS: Registry[Callable[[nn.Module], int]] = Registry("quantization method")


class QuantizedLinear(nn.Module):
    """A linear layer whose weight is stored quantised; ``float_weight`` is the (N, K) float weight it
    computes with, and ``stored`` the names its state dict holds in place of ``weight``."""

    stored: tuple[str, ...] = ()

    def float_weight(self) -> torch.Tensor:
        raise NotImplementedError


class Int8Linear(QuantizedLinear):
    """y = x W^T + b with W stored as int8 (N, K) and one float scale per output row: W ~ q * scale."""

    stored = ("weight_int8", "scales")

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()  # (N, K)
        scales = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # (N,): the row's largest |w| maps to 127
        self.register_buffer("weight_int8",
                             torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(linear.weight.dtype))
        self.bias = (None if linear.bias is None
                     else nn.Parameter(linear.bias.detach().clone(), requires_grad=False))
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)  # (..., K) -> (M, K)
        scales = self.scales.to(x.dtype)
        # a decode step: the fused kernel, no (N, K) temporary
        if flat.device.type == "cpu" and flat.shape[0] == 1:
            out = torch.ops.aten._weight_int8pack_mm(flat.contiguous(), self.weight_int8, scales)
        else:  # prefill / batches: that kernel slows down with M (40x at M = 32, 2-core AVX-512, torch 2.13)
            out = (flat @ self.weight_int8.to(x.dtype).T) * scales  # x (q s)^T = (x q^T) s: scale N outputs
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)  # (M, N) -> (..., N)

    def float_weight(self) -> torch.Tensor:
        return self.weight_int8.float() * self.scales.float()[:, None]  # (N, K): q * scale, row by row

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"


def _replace_linears(module: nn.Module, make: Callable[[nn.Linear], nn.Module]) -> int:
    count = 0
    for name, child in module.named_children():
        if type(child) is nn.Linear:
            setattr(module, name, make(child))
            count += 1
        else:
            count += _replace_linears(child, make)
    return count


@QUANTIZERS.register("int8")
def _int8_weight_only(model: nn.Module) -> int:
    return _replace_linears(model, Int8Linear)


def quantize(model: nn.Module, method: str = "int8") -> nn.Module:
    """Quantise `model`'s nn.Linear layers in place for inference (eval mode, no training afterwards) and
    return it. `method`: one of QUANTIZERS ("int8": weight-only). Embedding tables stay float (a tied output
    head gets its own int8 copy; the embedding lookup keeps the float table)."""
    make = QUANTIZERS.get(method)
    model.eval()
    with torch.no_grad():
        replaced = make(model)
    if replaced == 0:
        raise ValueError(f"quantize(model, {method!r}) found no nn.Linear layer to quantise in "
                         f"{type(model).__name__}.")
    return model


def float_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with each quantised layer's stored tensors replaced by the float ``weight`` it
    computes with (int8: q * scale), so a quantised model exports as its dequantised weights. A model without
    quantised layers gives its own state dict."""
    state = dict(model.state_dict())
    for name, module in model.named_modules():
        if isinstance(module, QuantizedLinear):
            prefix = f"{name}." if name else ""
            for key in module.stored:
                state.pop(prefix + key, None)
            state[prefix + "weight"] = module.float_weight().detach()
    return state
