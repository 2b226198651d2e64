"""Why zoo's int8 decoding was slower than fp32, and what the quantised layers' defaults rest on: one decode
row (M = 1) through the Qwen2.5-0.5B shapes with torch's CPU kernels, per activation dtype, thread count and
int4 group size (best of 10 after a warm-up; weights random).

    python -m bench.quant_kernels
"""

from __future__ import annotations

import torch

from bench.common import best_seconds, markdown_table

SHAPES = [(4864, 896, "up / gate (one of two)"), (896, 4864, "down"), (151936, 896, "head (tied table)")]


def best_ms(fn, repeats: int = 10) -> float:
    return best_seconds(fn, repeats) * 1e3


def _row(n: int, k: int, what: str, threads: int) -> list:
    """One shape's times: fp32 matmul, the int8 kernel with fp32 / bf16 activations, int4 per group size."""
    weight = torch.randn(n, k)
    q8 = torch.randint(-127, 128, (n, k), dtype=torch.int8)
    codes = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    x32, x16 = torch.randn(1, k), torch.randn(1, k, dtype=torch.bfloat16)
    int4 = torch.ops.aten._weight_int4pack_mm_for_cpu
    row = [threads, f"{n} x {k} ({what})", best_ms(lambda: x32 @ weight.T)]
    for x in (x32, x16):
        scales = torch.rand(n, dtype=x.dtype)
        row.append(best_ms(lambda: torch.ops.aten._weight_int8pack_mm(x, q8, scales)))  # noqa: B023
    for group in (32, 64, 128):
        sz = torch.rand(k // group, n, 2, dtype=torch.bfloat16)
        row.append(best_ms(lambda: int4(x16, packed, group, sz)))  # noqa: B023
    sz32 = torch.rand(k // 128, n, 2)
    row.append(best_ms(lambda: int4(x32, packed, 128, sz32), repeats=3))
    return row[:2] + [f"{ms:.2f}" for ms in row[2:]]


def main() -> None:
    torch.manual_seed(0)
    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for n, k, what in SHAPES:
            rows.append(_row(n, k, what, threads))
            print(rows[-1], flush=True)
    print(markdown_table(["threads", "N x K", "fp32 matmul ms", "int8 kernel, fp32 x ms",
                          "int8 kernel, bf16 x ms", "int4 g32 bf16 ms", "int4 g64 bf16 ms",
                          "int4 g128 bf16 ms", "int4 g128, fp32 x ms"], rows))


if __name__ == "__main__":
    main()
