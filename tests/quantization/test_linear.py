"""zoo.quantization.linear: each quantised layer against a dequantised matmul written here by hand (the
quantisation rules restated, not read from zoo), the kernels' bf16 rounding bounded, and the int8 decode
step on the kernel's vectorised path (not the scalar fallback that made int8 slower than fp32)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from zoo.quantization import Int4Linear, Int8Linear


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


def _close_to_bf16_output(got: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias) -> None:
    """got == bf16(x) @ weight^T (+ bias) up to the output's rounding to bf16 (8-bit mantissa: 2^-8 of the
    value) and fp32 accumulation order."""
    ref = _bf16(x) @ weight.T
    tol = ref.abs() * 2.0**-8 + 1e-5
    assert bool(((got - (ref if bias is None else ref + bias)).abs() <= tol).all())


def test_int8_linear_hand_worked():
    """Row [1, -2, 0.5]: scale bf16(2/127) = 0.0157470703125, q = round(w / scale) = [64, -127, 32];
    y = bf16(x) . (q * scale) + b."""
    lin = nn.Linear(16, 1)
    with torch.no_grad():
        lin.weight.zero_()
        lin.weight[0, :3] = torch.tensor([1.0, -2.0, 0.5])
        lin.bias.fill_(0.25)
    q = Int8Linear(lin)
    assert q.weight_int8[0, :3].tolist() == [64, -127, 32] and not q.weight_int8[0, 3:].any()
    assert q.scales.dtype == torch.bfloat16 and float(q.scales[0]) == 0.0157470703125
    x = torch.zeros(1, 16)
    x[0, :3] = torch.tensor([1.0, 1.0, 2.0])
    expected = (64 - 127 + 2 * 32) * 0.0157470703125 + 0.25
    torch.testing.assert_close(q(x), torch.tensor([[expected]]), atol=1e-6, rtol=2.0**-8)


@pytest.mark.parametrize("rows", [1, 5], ids=["decode-step", "prefill"])
def test_int8_linear_matches_dequantised_matmul(rows):
    torch.manual_seed(0)
    lin = nn.Linear(48, 40)
    q = Int8Linear(lin)
    scales = _bf16(lin.weight.detach().abs().amax(dim=1) / 127)  # the rule, restated
    codes = torch.round(lin.weight.detach() / scales[:, None]).clamp(-127, 127)
    dequant = codes * scales[:, None]  # (N, K)
    assert torch.equal(q.weight_int8.float(), codes)
    assert torch.equal(q.float_weight(), dequant)
    assert bool(((dequant - lin.weight).abs() <= scales[:, None] / 2 + 1e-7).all())  # half a step
    x = torch.randn(2, rows, 48)  # (B, T, K): leading dims pass through
    with torch.no_grad():
        _close_to_bf16_output(q(x), x, dequant, lin.bias)


def _int4_reference(weight: torch.Tensor, group: int, symmetric: bool) -> torch.Tensor:
    """Dequantised weight (N, K) by the kernel's rule W = (code - 8) * scale + zero, per group of `group`
    along K, scales and zeros held in bf16 and codes rounded against them."""
    n, k = weight.shape
    w = weight.reshape(n, k // group, group)
    if symmetric:
        scale = _bf16(w.abs().amax(-1) / 7)
        zero = torch.zeros_like(scale)
    else:
        low, high = w.amin(-1), w.amax(-1)
        scale = _bf16((high - low) / 15)
        zero = _bf16(low + 8 * scale)
    codes = (torch.round((w - zero[..., None]) / scale[..., None]) + 8).clamp(0, 15)
    return ((codes - 8) * scale[..., None] + zero[..., None]).reshape(n, k)


@pytest.mark.parametrize("group,symmetric", [(32, False), (64, True), (128, False)])
@pytest.mark.parametrize("rows", [1, 6], ids=["decode-step", "prefill"])
def test_int4_linear_matches_dequantised_matmul(group, symmetric, rows):
    torch.manual_seed(1)
    lin = nn.Linear(256, 80)  # N a multiple of 16 but not of the 64-row AVX512 block: both packings
    q = Int4Linear(lin, group, symmetric)
    dequant = _int4_reference(lin.weight.detach(), group, symmetric)
    torch.testing.assert_close(q.float_weight(), dequant, atol=0, rtol=0)
    groups = lin.weight.detach().reshape(80, -1, group)
    step = groups.abs().amax(-1) / 7 if symmetric else (groups.amax(-1) - groups.amin(-1)) / 15
    bound = step / 2 * 1.01 + groups.abs().amax(-1) * 2.0**-8  # half a step, and the bf16 scale / zero
    assert bool(((dequant - lin.weight).abs() <= bound.repeat_interleave(group, 1)).all())
    x = torch.randn(rows, 3, 256)
    with torch.no_grad():
        _close_to_bf16_output(q(x), x, dequant, lin.bias)


class _Ops(TorchDispatchMode):
    """Records each aten op a forward runs, with its first argument's dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, torch.dtype | None]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        self.calls.append((func.overloadpacket.__name__, None if first is None else first.dtype))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("make", "kernel"), [(Int8Linear, "_weight_int8pack_mm"),
                                              (lambda lin: Int4Linear(lin, 128, False),
                                               "_weight_int4pack_mm_for_cpu")], ids=["int8", "int4"])
def test_a_decode_step_runs_the_fused_kernel_on_bf16_activations(make, kernel):
    """One row (a decode step) goes through torch's fused kernel with bfloat16 activations, the only dtype
    its CPU path vectorises (with float32 ones it ran a scalar loop 10-25x slower than fp32's matmul:
    docs/quantization.md, bench/quant_kernels.py), and no float matmul of the whole weight runs beside it.
    The speed itself is the decode_large bench section's to measure, not a unit test's."""
    torch.manual_seed(0)
    q = make(nn.Linear(1024, 2048, bias=False))
    x = torch.randn(1, 1024)
    with torch.no_grad(), _Ops() as ops:
        out = q(x)
    assert (kernel, torch.bfloat16) in ops.calls, ops.calls
    assert not [name for name, _ in ops.calls if name in ("mm", "addmm", "linear", "matmul")], ops.calls
    assert out.dtype == torch.float32
