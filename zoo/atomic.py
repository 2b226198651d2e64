"""Atomic file writes: write a temporary file beside the target, fsync, then rename over it, so a reader
(or a crash) never sees a half-written cache entry or checkpoint. Whole folders (exports) are swapped the
same way: built beside the target, then renamed in."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """`with atomic_file(p) as f: f.write(...)`: `p` appears only if the block finishes without error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give what a plain open() would (shared runs/caches)
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through `atomic_file`."""
    with atomic_file(path) as f:
        f.write(data)


def atomic_write_json(path: str | os.PathLike, obj: object) -> None:
    """``obj`` as indented UTF-8 JSON, written through `atomic_file`."""
    atomic_write_bytes(path, json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8"))


def default_mode(path: str | os.PathLike, *, directory: bool = False) -> None:
    """Give `path` the mode a plain open() or mkdir() would (0666 / 0777 less the umask): mkstemp, mkdtemp
    and safetensors create 0600 / 0700, which hides exports from everyone else who reads checkpoints."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's data, or a folder's entries (the renames done in it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike) -> None:
    """fsync every file and folder under `path`, so renaming it into place publishes complete files."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            fsync_path(os.path.join(root, name))
        fsync_path(root)


# ----------------------------------------------------------------------------- whole-folder swaps
# A folder is built complete under `.<name>.new-*` beside its target, then swapped in (exchanged with it, or
# the old one renamed to `.<name>.old-*` and the new one renamed in), and only then the old one deleted. A
# kill at any point leaves a complete folder under one of those names; `recover_folder` (called before the
# next swap) puts the old one back if the target is missing and deletes the rest.


def staging_folder(target: Path) -> Path:
    """A new empty folder beside `target` (same filesystem, so it can be renamed onto it), mode 0777-umask."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    default_mode(staging, directory=True)
    return staging


def swap_folder(staging: Path, target: Path) -> None:
    """Replace folder `target` (if any) by the complete folder `staging`. On Linux the two are exchanged in
    one atomic step; elsewhere the old one is renamed aside first, and a kill before the new one is renamed
    in leaves the target missing until `recover_folder` puts the old one back."""
    fsync_tree(staging)
    aside = None
    if not target.exists():
        os.rename(staging, target)
    elif exchange(staging, target):
        aside = staging  # now holds the old folder
    else:
        aside = target.with_name(f".{target.name}.old-{secrets.token_hex(4)}")
        os.rename(target, aside)
        try:
            os.rename(staging, target)
        except BaseException:
            os.rename(aside, target)
            raise
    fsync_path(target.parent)
    if aside is not None:
        remove_tree(aside)


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux `renameat2(RENAME_EXCHANGE)`); False where the system or
    the file system cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None) if sys.platform == "linux" else None
    if renameat2 is None:
        return False
    at_cwd, rename_exchange = -100, 2
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def recover_folder(target: Path, contents: Collection[str]) -> None:
    """Undo what a swap killed half way left beside `target`: the old folder goes back if the target is
    missing; other staging and old folders are deleted, but only those holding nothing beyond `contents`
    (the names zoo writes there), so a user's look-alike folder is never touched."""
    asides = sorted(_leftovers(target, r"old-.+"), key=lambda p: p.lstat().st_ctime)
    if asides and not os.path.lexists(target):
        os.rename(asides.pop(), target)  # the newest: the one a killed swap had just moved aside
    for leftover in asides + _leftovers(target, r"new-.+|[a-z0-9_]{8}"):  # 8 chars: older zoo's staging
        if {p.name for p in leftover.iterdir()} <= set(contents):
            remove_tree(leftover)


def remove_tree(path: Path) -> None:
    """Delete a folder zoo wrote, read-only sub-folders included; what cannot go is left for the next call."""
    if path.is_symlink():  # never follow a link out of the folder
        return
    for root, _dirs, _files in os.walk(path):
        os.chmod(root, os.lstat(root).st_mode | stat.S_IRWXU)
    shutil.rmtree(path, ignore_errors=True)


def _leftovers(target: Path, kind: str) -> list[Path]:
    """Folders beside `target` named `.<target name>.<kind>`."""
    if not target.parent.is_dir():
        return []
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(?:{kind})")
    return [p for p in target.parent.iterdir() if pattern.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]
