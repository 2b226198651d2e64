"""Weight-only quantised linear layers on torch's CPU kernels (the ones gpt-fast uses): int8 per output
channel (`_weight_int8pack_mm`) and int4 per group of the input dimension (`_weight_int4pack_mm_for_cpu`).

Both kernels are vectorised (AVX512 / AVX2) for bfloat16 activations only; with float32 ones they run a
scalar loop 25x (int8) to 50x (int4) slower than fp32 matmul (measured in docs/quantization.md). So a layer
rounds its input to bf16, calls the kernel and returns the output in the input's dtype: activations lose
bits (8-bit mantissa, ~0.4%), far less than the weights do. Scales (and int4's zeros) are stored in bf16, the
dtype the kernel reads them in, and the weights are rounded against those stored values, so `float_weight`
is exactly what the kernel multiplies by."""

from __future__ import annotations

import torch
from torch import nn

KERNEL_DTYPE = torch.bfloat16  # the activation / scale dtype the CPU kernels vectorise
INT8_K_MULTIPLE = 16  # _weight_int8pack_mm's bf16 path reads K in 16-wide vectors (other K: wrong outputs)
INT4_N_MULTIPLE = 16  # _convert_weight_to_int4pack_for_cpu packs N in blocks of 16
INT4_GROUP_SIZES = (32, 64, 128, 256)  # _weight_int4pack_mm_for_cpu's qGroupSize


class QuantizedLinear(nn.Module):
    """A linear layer whose weight is stored quantised; ``float_weight`` is the (N, K) float weight it
    computes with, and ``stored`` the names its state dict holds in place of ``weight``."""

    stored: tuple[str, ...] = ()
    in_features: int
    out_features: int

    def float_weight(self) -> torch.Tensor:
        raise NotImplementedError

    def _keep_bias(self, linear: nn.Linear) -> None:
        self.bias = (None if linear.bias is None
                     else nn.Parameter(linear.bias.detach().clone(), requires_grad=False))
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def _finish(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out = out.to(x.dtype)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)  # (M, N) -> (..., N)


class Int8Linear(QuantizedLinear):
    """y = x W^T + b with W stored as int8 (N, K) and one bf16 scale per output row: W = q * scale, the
    row's largest |w| mapped to 127."""

    stored = ("weight_int8", "scales")

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()  # (N, K)
        scales = (weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0).to(KERNEL_DTYPE)  # (N,)
        q = torch.round(weight / scales.float()[:, None]).clamp(-127, 127)  # against the stored scale
        self.register_buffer("weight_int8", q.to(torch.int8))
        self.register_buffer("scales", scales)
        self._keep_bias(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)  # (..., K) -> (M, K)
        if flat.device.type == "cpu":
            out = torch.ops.aten._weight_int8pack_mm(flat.to(KERNEL_DTYPE).contiguous(), self.weight_int8,
                                                     self.scales)
        else:  # no CPU kernel: the weights converted per call, the N outputs scaled (x (q s)^T = (x q^T) s)
            out = (flat @ self.weight_int8.to(flat.dtype).T) * self.scales.to(flat.dtype)
        return self._finish(out, x)

    def float_weight(self) -> torch.Tensor:
        return self.weight_int8.float() * self.scales.float()[:, None]  # (N, K): q * scale, row by row

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"


def int4_codes(weight: torch.Tensor, group_size: int, symmetric: bool
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """weight (N, K) -> (codes (N, K) int32 in 0..15, scales (N, G) bf16, zeros (N, G) bf16), G = K /
    group_size, such that W = (code - 8) * scale + zero per group (the kernel's rule). Asymmetric: the
    group's [min, max] spread over 16 codes; symmetric: zero 0 and scale max|w| / 7 (codes 1..15)."""
    n, k = weight.shape
    groups = weight.float().reshape(n, k // group_size, group_size)  # (N, G, g)
    if symmetric:
        scales = (groups.abs().amax(dim=-1).clamp(min=1e-12) / 7.0).to(KERNEL_DTYPE)
        zeros = torch.zeros_like(scales)
    else:
        low, high = groups.amin(dim=-1), groups.amax(dim=-1)
        scales = ((high - low).clamp(min=1e-12) / 15.0).to(KERNEL_DTYPE)
        zeros = (low + 8 * scales.float()).to(KERNEL_DTYPE)  # code 0 is the group's min
    codes = torch.round((groups - zeros.float()[..., None]) / scales.float()[..., None]) + 8
    return codes.clamp(0, 15).to(torch.int32).reshape(n, k), scales, zeros


class Int4Linear(QuantizedLinear):
    """y = x W^T + b with W stored as 4-bit codes in groups of `group_size` along K, each group with a bf16
    scale and zero: W = (code - 8) * scale + zero. The codes live in the kernel's packed layout, which
    depends on the CPU (AVX512 / AVX2 / plain); the state dict holds them portably as bytes (N, K / 2), two
    codes each (even k in the low nibble), and loading packs them for this CPU."""

    stored = ("weight_int4", "scales_and_zeros")

    def __init__(self, linear: nn.Linear, group_size: int, symmetric: bool) -> None:
        super().__init__()
        self.group_size, self.symmetric = group_size, symmetric
        codes, scales, zeros = int4_codes(linear.weight.detach(), group_size, symmetric)
        self.register_buffer("weight_packed", _pack(codes), persistent=False)
        # (G, N, 2): the kernel's qScaleAndZeros
        self.register_buffer("scales_and_zeros", torch.stack([scales.T, zeros.T], dim=-1).contiguous())
        self._keep_bias(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(KERNEL_DTYPE).contiguous()  # (M, K)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.weight_packed, self.group_size,
                                                         self.scales_and_zeros)
        return self._finish(out, x)

    def codes(self) -> torch.Tensor:
        """The (N, K) codes 0..15, read back through the kernel itself: the identity times the weights with
        scale 1 and zero 8 gives each code exactly (small integers are exact in bf16), whatever the CPU's
        packed layout."""
        k = self.in_features
        unit = self.scales_and_zeros.new_zeros(self.scales_and_zeros.shape)
        unit[..., 0], unit[..., 1] = 1.0, 8.0
        eye = torch.eye(k, dtype=KERNEL_DTYPE, device=self.weight_packed.device)
        # (K, N): row j is code[:, j]; chunks of K keep the temporary small on a wide layer
        cols = [torch.ops.aten._weight_int4pack_mm_for_cpu(eye[i:i + 256], self.weight_packed,
                                                           self.group_size, unit) for i in range(0, k, 256)]
        return torch.cat(cols).T.round().to(torch.int32)  # (N, K)

    def float_weight(self) -> torch.Tensor:
        scales = self.scales_and_zeros[..., 0].float().T.repeat_interleave(self.group_size, dim=1)  # (N, K)
        zeros = self.scales_and_zeros[..., 1].float().T.repeat_interleave(self.group_size, dim=1)
        return (self.codes().float() - 8) * scales + zeros

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        codes = self.codes().to(torch.uint8)  # (N, K)
        destination[prefix + "weight_int4"] = codes[:, 0::2] | (codes[:, 1::2] << 4)  # (N, K / 2)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        key = prefix + "weight_int4"
        portable = state_dict.get(key)
        expected = (self.out_features, self.in_features // 2)
        if portable is None:
            missing_keys.append(key)
        elif tuple(portable.shape) != expected or portable.dtype != torch.uint8:
            error_msgs.append(f"{key}: expected uint8 {expected} (two 4-bit codes per byte), got "
                              f"{portable.dtype} {tuple(portable.shape)}.")
        else:
            codes = torch.stack([portable & 15, portable >> 4], dim=-1).reshape(expected[0], -1)  # (N, K)
            self.weight_packed = _pack(codes.to(torch.int32)).to(self.weight_packed.device)
        rest = {k: v for k, v in state_dict.items() if k != key}
        super()._load_from_state_dict(rest, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def extra_repr(self) -> str:
        kind = "symmetric" if self.symmetric else "asymmetric"
        return (f"in_features={self.in_features}, out_features={self.out_features}, int4 weights, "
                f"group_size={self.group_size}, {kind}")


def _pack(codes: torch.Tensor) -> torch.Tensor:
    """(N, K) int32 codes -> torch's packed uint8 (N, K / 2) for this CPU."""
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), 1)
