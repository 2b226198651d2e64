"""bench/bench_loop_causes.py's `cumulative` on a real cProfile record: a cause named by a method that an
override of the same name calls (Lightning's _PrefetchDataFetcher.__next__ -> _DataFetcher.__next__, both in
loops/fetchers.py) is counted once, not once per nesting level."""

from __future__ import annotations

import cProfile
import importlib.util
import pstats
from pathlib import Path

import pytest

from bench.bench_loop_causes import cumulative

NESTED = '''
import time


class Base:
    def __next__(self):
        start = time.perf_counter()
        while time.perf_counter() - start < 0.02:
            pass
        return 1


class Prefetching(Base):
    def __next__(self):
        return super().__next__()


class Other:
    def __next__(self):  # a second, separate caller: its time adds
        start = time.perf_counter()
        while time.perf_counter() - start < 0.01:
            pass
        return 2
'''


def test_a_method_calling_its_namesake_is_counted_once(tmp_path: Path):
    (tmp_path / "fetchers.py").write_text(NESTED)
    spec = importlib.util.spec_from_file_location("p14_fetchers", tmp_path / "fetchers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(3):
        next(module.Prefetching())
    next(module.Other())
    profiler.disable()
    stats = pstats.Stats(profiler)
    by_line = {line: entry[3] for (file, line, func), entry in stats.stats.items()
               if file.endswith("fetchers.py") and func == "__next__"}
    lines = [i + 1 for i, text in enumerate(NESTED.splitlines()) if "def __next__" in text]
    assert sorted(by_line) == lines  # Base, Prefetching, Other
    prefetching, other = by_line[lines[1]], by_line[lines[2]]
    expected = prefetching + other  # Base's time is inside Prefetching's
    assert cumulative(stats, ("fetchers.py", "__next__")) == pytest.approx(expected, rel=1e-9)
    assert expected > 0.06
