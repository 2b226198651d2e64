"""Shared test settings: deterministic seeds, one torch thread per process, and the order and worker count
of `pytest -n auto` (pyproject's addopts).

Tiny models run fastest on one thread: two threads on a busy 2-core machine cost up to 17x the CPU in
spin-waits. `-n auto` gives each core its own worker instead; OMP_NUM_THREADS carries the choice into
subprocesses (train.py, DDP pairs)."""

from __future__ import annotations

import os
import sys

# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set (this machine sets it): without the cache every
# worker and every train.py subprocess compiles zoo and re-rewrites ~300 test modules' asserts (~7 CPU s per
# worker). The cache lives in __pycache__/, which git ignores; set before the test modules are imported.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))
# nothing is downloaded in tests: a library that asks the Hub (bitsandbytes' CPU kernel, through `kernels`)
# fails at once instead of waiting on a network this machine does not have
os.environ.setdefault("HF_HUB_OFFLINE", "1")
MAX_WORKERS = 8  # each worker imports torch and builds its own session fixtures (~20 CPU s, ~1.5 GB)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one worker per core up to MAX_WORKERS; none when single tests (`file::name`) are named,
    where starting workers costs more than it saves. PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if any("::" in arg for arg in config.args):
        return 0
    return min(len(os.sched_getaffinity(0)), MAX_WORKERS)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with end-to-end tests first (they hold the longest tests: DDP pairs, train.py runs), so the
    workers finish together instead of one running a DDP module alone at the end; order within a module
    kept."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("e2e")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def fresh_interpreter(tmp_path_factory):
    """tests/fresh_interpreter.py's steps, run once per session in one new interpreter: step -> what it
    printed and the modules loaded after it."""
    from tests.fresh_interpreter import read_steps, write_steps
    from tests.once import once_per_session

    return read_steps(once_per_session(tmp_path_factory, "fresh_interpreter", write_steps))
