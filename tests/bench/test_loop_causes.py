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


def test_startup_rows_are_cumulative_and_each_side_less_its_own_imports(monkeypatch, tmp_path: Path):
    """The start-up table: each import row adds to the one above, with its interpreter exit beside it; each
    side's first-step CPU less the imports it makes (train.py: the last row, the imports as train.py makes
    them; the minimal loop: zoo's model code) is its own work."""
    import bench.bench_loop_causes as causes
    from bench.bench_loop import SHAPES

    cpu = {code: (1.0 + 0.5 * i, 0.1 * i) for i, code in enumerate(causes.STARTUP_IMPORTS.values())}
    monkeypatch.setattr(causes, "import_cpu", lambda code, repeats: cpu[code])  # 1.0 .. 4.0; exit 0.0 .. 0.6
    firsts = iter([4.5, 4.3, 1.9, 1.7])  # train.py twice, then the minimal loop twice: the least counts
    monkeypatch.setattr(causes, "run_side", lambda command, out: {"cpu_first_step": next(firsts)})
    table, notes = causes.startup_table(SHAPES[True][0], tmp_path / "spec.json", tmp_path, 2)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert [r[1] for r in rows[:7]] == ["1.00", "1.50", "2.00", "2.50", "3.00", "3.50", "4.00"]
    assert all(r[2] == "+0.50" for r in rows[1:6]) and rows[6][2] == "+0.50 (vs the row above)"
    assert [r[3] for r in rows[:7]] == ["0.00", "0.10", "0.20", "0.30", "0.40", "0.50", "0.60"]
    assert rows[7][1] == "4.30" and rows[8][1] == "0.30"  # train.py: 4.30 - 4.00
    assert rows[9][1] == "1.70" and rows[10][1] == "0.20"  # the minimal loop: 1.70 - 1.50
    assert "+2.60 s CPU" in notes[0] and "+2.50 s" in notes[0]


def test_import_cpu_reads_the_imports_and_the_exit_apart():
    """One fresh interpreter: the CPU at its last atexit handler (the work before it included) and the CPU of
    its exit after it (here: collecting a large heap of cycles) are told apart."""
    from bench.bench_loop_causes import import_cpu

    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass"
    heap = "x = [[[]] for _ in range(300_000)]\nfor a in x:\n    a[0].append(a)"  # cycles left for the exit
    cpu, exit_cpu = import_cpu(busy, 1)
    assert cpu >= 0.2 and exit_cpu < 0.2
    cpu, exit_cpu = import_cpu(heap, 1)
    assert exit_cpu > 0.03
