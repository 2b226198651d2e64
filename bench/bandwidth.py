"""How fast this machine reads memory, measured the way STREAM does (time a kernel that reads a buffer once,
best of several): the yardstick for batch-1 decoding, which reads every weight once per token.

Two kernels (a sum and a matrix-vector product) at two sizes: the bytes a model's decode step reads (its
working set: on a CPU with a large last-level cache the weights of a small model stay there, so this is the
limit that model can reach) and 1 GiB (well past any cache: main memory)."""

from __future__ import annotations

import torch

from bench.common import best_seconds

GIB = 2**30


def read_bandwidth(nbytes: int, repeats: int = 7) -> dict[str, float]:
    """GB/s (1e9 bytes) of reading an fp32 buffer of ~nbytes: `sum` (a reduction over it) and `matvec` (the
    buffer as a (rows, 1024) matrix times a vector: what a decode step's linear layers do), best of
    `repeats`."""
    n = max(nbytes // 4 // 1024, 1) * 1024
    buffer = torch.rand(n)
    matrix, vector = buffer.view(-1, 1024), torch.rand(1024)
    read = n * 4
    return {"sum": read / best_seconds(buffer.sum, repeats) / 1e9,
            "matvec": read / best_seconds(lambda: matrix @ vector, repeats) / 1e9}


def limit(nbytes: int, repeats: int = 7) -> float:
    """The faster of the two kernels at this size: the best read rate the machine showed for that buffer."""
    return max(read_bandwidth(nbytes, repeats).values())


def fastest_threads(nbytes: int, repeats: int = 5) -> tuple[int, dict[int, float]]:
    """The torch thread count (1 .. cores) whose matrix-vector product over ~nbytes reads fastest, and each
    count's rate: on a shared machine two threads can lose to one (each parallel region waits for both).
    Leaves torch at the chosen count."""
    import os

    rates = {}
    for threads in range(1, (os.cpu_count() or 1) + 1):
        torch.set_num_threads(threads)
        rates[threads] = read_bandwidth(nbytes, repeats)["matvec"]
    best = max(rates, key=rates.get)
    torch.set_num_threads(best)
    return best, rates
