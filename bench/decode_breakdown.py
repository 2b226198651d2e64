"""Where one decode step's time goes: a whole `generate` call profiled with torch.profiler, op self-times
grouped (matmuls, attention, compiled kernels, other tensor ops) and the rest of the wall time (Python,
module calls, dispatch, waiting for threads) by difference; divided by the tokens made, in ms per token.
The profiler adds its own cost per op, so the groups are a picture of the proportions, not exact times."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

GROUPS = (  # (group, substrings of profiler event names), first match wins
    ("compiled graph (kernels + wrapper)",
     ("CompiledFxGraph", "Torch-Compiled", "TorchDynamo", "AOTDispatcher", "Pregraph", "cpp_fused")),
    ("matmuls (weights)", ("addmm", "aten::mm", "aten::bmm", "int8pack")),
    ("attention", ("scaled_dot_product", "flash_attention")),
)
REST = "python + dispatch (wall - ops)"
OTHER = "other tensor ops"


def group(name: str) -> str:
    return next((g for g, keys in GROUPS if any(k in name for k in keys)), OTHER)


def breakdown(fn: Callable[[], object], tokens: int) -> dict[str, float]:
    """ms per token of one call of `fn` (warm), by group, plus `total`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        fn()
        wall = time.perf_counter() - start
    self_us: Counter[str] = Counter()
    for event in prof.key_averages():
        self_us[group(event.key)] += event.self_cpu_time_total
    ms = {name: us / 1e3 / tokens for name, us in self_us.items()}
    total = wall * 1e3 / tokens
    ms[REST] = max(0.0, total - sum(ms.values()))
    ms["total"] = total
    return ms


def columns() -> list[str]:
    return ["total", GROUPS[1][0], GROUPS[2][0], GROUPS[0][0], OTHER, REST]
