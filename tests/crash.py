"""Fault injection for the save and export tests: stop an operation at its k-th file-system step, either as
an exception (its clean-up handlers run) or as a kill (a copy of the disk taken just before that step is
what a SIGKILL would have left; no handler runs)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import safetensors.torch

# Calls that change what is on disk or end a write: renames, deletions, fsyncs and the writers (zoo's and
# those of older versions).
STEPS: list[tuple[object, str]] = [
    (os, "replace"), (os, "rename"), (os, "unlink"), (os, "rmdir"), (os, "fsync"), (shutil, "rmtree"),
    (Path, "write_text"), (safetensors.torch, "save_file"),
]


class Killed(BaseException):
    """The injected failure: a BaseException, so no `except Exception` in the code under test swallows it."""


@contextmanager
def stop_at(at: int | None, root: Path, image: Path, steps: list[tuple[object, str]]) -> Iterator[list[str]]:
    """Count the `steps` called inside the block (their names are yielded); at step `at` copy `root` to
    `image` and raise Killed. `at=None` only counts."""
    done: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for owner, name in steps:
            patch.setattr(owner, name, _step(getattr(owner, name), name, at, done, root, image))
        yield done


def _step(real: Callable, name: str, at: int | None, done: list[str], root: Path, image: Path) -> Callable:
    def step(*args, **kwargs):
        if len(done) == at:  # once: the clean-up that the exception triggers runs unhindered
            done.append(f"{name}: stopped here")
            shutil.copytree(root, image, symlinks=True)  # copytree only creates: no counted step runs
            raise Killed(f"stopped before step {at}: {name}")
        where = os.path.basename(args[0]) if args and isinstance(args[0], (str, os.PathLike)) else ""
        done.append(f"{name}({where})")
        return real(*args, **kwargs)

    return step


def state(folder: Path) -> frozenset[tuple[str, bytes]]:
    """Every path under `folder` with its bytes (None for folders), random parts of temp names masked: two
    steps that leave the same state need checking once."""
    return frozenset(
        (RANDOM.sub("*", str(p.relative_to(folder))), p.read_bytes() if p.is_file() else b"/")
        for p in folder.rglob("*")
    )


RANDOM = re.compile(r"(?<=[.-])[a-z0-9_]{8,16}(?=\.|/|$)")  # mkstemp / mkdtemp / token / save-id suffixes


def hidden(folder: Path) -> list[str]:
    """Names in `folder` that start with a dot (temp and staging files)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
