"""What every benchmark section shares: interleaved timing (warm-up, rotate the sides, median of repeats),
the machine description, markdown tables, and a torch.profiler summary of the top ops."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import torch


@dataclass
class Timing:
    """Seconds per call of one side; `median` is what the tables use (robust to a neighbour's burst)."""

    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy this side was during the run."""
        return (max(self.seconds) - min(self.seconds)) / self.median if self.median > 0 else 0.0


@dataclass(frozen=True)
class SelfTimed:
    """Returned by a side that times itself (to leave out set-up it cannot avoid, e.g. Trainer.fit)."""

    seconds: float


def best_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """The fastest of `repeats` timed calls of `fn`, after one untimed call (page faults and cache warm-up are
    not what is measured): STREAM's convention, the least-disturbed run on a shared machine."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def interleaved(sides: Mapping[str, Callable[[], Any]], *, warmup: int = 1,
                repeats: int = 5) -> dict[str, Timing]:
    """Time each side's call `repeats` times, alternating the sides (A B C, B C A, C A B, ...) so that a
    load burst on this shared machine hits every side alike; `warmup` untimed rounds first. A side that
    returns `SelfTimed` reports its own seconds."""
    if repeats < 1 or warmup < 0:
        raise ValueError("interleaved: repeats must be >= 1 and warmup "
                         f">= 0, got repeats={repeats}, warmup={warmup}.")
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            sides[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:  # rotate: no side always runs first
            start = time.perf_counter()
            result = sides[name]()
            elapsed = time.perf_counter() - start
            times[name].append(result.seconds if isinstance(result, SelfTimed) else elapsed)
    return {name: Timing(t) for name, t in times.items()}


def step_loop(loss_of: Callable[[], torch.Tensor], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              steps: int, clip: float | None = None) -> Callable[[], float]:
    """A closure running `steps` training steps (loss, backward, optional global-norm clip, optimizer step,
    zeroed gradients); returns the last loss. One loop for every bench side, so sides differ only in what
    they are meant to compare."""

    def run() -> float:
        for _ in range(steps):
            loss = loss_of()
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return run


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux) or platform.processor()."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, str]:
    """What the numbers were measured on: CPU, cores, threads, library versions, date."""
    info = {
        "date (UTC)": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "CPU": cpu_model(),
        "logical cores": str(os.cpu_count()),
        "torch threads": str(torch.get_num_threads()),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "GPU": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU only)",
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = "not installed"
    try:
        import lightning

        info["lightning"] = lightning.__version__
    except ImportError:
        info["lightning"] = "not installed"
    if hasattr(os, "getloadavg"):
        info["load average at start (1 min)"] = f"{os.getloadavg()[0]:.1f}"
    return info


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats are printed by the caller (so each column picks its precision)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Section:
    """One benchmark section's result: a markdown table, notes under it, and raw numbers for others."""

    title: str
    table: str
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    goals: list[tuple[str, float, float]] = field(default_factory=list)  # (what, measured ratio, target)

    def markdown(self) -> str:
        parts = [f"## {self.title}", "", self.table]
        if self.notes:
            parts += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(parts)


def top_ops(fn: Callable[[], Any], *, rows: int = 8) -> list[tuple[str, float, int]]:
    """Profile one call of `fn` with torch.profiler (CPU): (op, share of self CPU time %, calls), largest
    first. Used where a goal is missed, to say where the time goes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.key_averages() if not e.key.startswith("ProfilerStep")]
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return [(e.key, 100.0 * e.self_cpu_time_total / total, e.count) for e in events[:rows]]


def top_ops_table(ops: Sequence[tuple[str, float, int]]) -> str:
    return markdown_table(["op", "self CPU %", "calls"], [(f"`{n}`", f"{s:.1f}", c) for n, s, c in ops])


def goal(value: float, target: float) -> str:
    """'met' / 'missed' for a ratio against its goal (>= target)."""
    return "met" if value >= target else "**missed**"
