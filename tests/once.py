"""Work done once per test session across pytest-xdist workers: the first worker to ask does it under a file
lock in the session's shared temp folder; the others wait for the lock and find it done."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str,
                     make: Callable[[Path], None]) -> Path:
    """<the session's temp folder>/<name>, filled by `make(root)` once per session (not once per worker)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, across workers
    root = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not (root / "done").is_file():
            if root.exists():
                pytest.fail(f"an earlier attempt to make {root} failed")
            make(root)
            (root / "done").touch()
    return root
