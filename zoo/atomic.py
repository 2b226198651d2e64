"""One publish protocol for everything zoo writes (training checkpoints, data-cache entries, exports,
save_pretrained): build the file or folder under a temporary name beside its target, fsync, rename (or swap)
it into place, and `sweep` what killed writers left. A reader, or a crash, never sees half of it.

A temporary name says whose it is: `.<target>.<host>-<pid>.<random>.tmp` (`.old`: a folder swapped out of
the way), so a sweep of a place other processes write too removes a dead writer's leftovers, never a live
one's. Names older zoo versions left (`.<target>.<random>.tmp`, `.<target>.new-*`, `.old-*`) are swept too."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import secrets
import shutil
import socket
import stat
import sys
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"
# A temp nobody has touched for this long has no live writer, whoever wrote it (its host may be another one).
STALE_AFTER_S = 3600.0
# A temp of a dead process on this host: stale once idle this long (a guard against pid namespaces sharing a
# host name and a folder).
DEAD_OWNER_GRACE_S = 60.0
# after `.<target>.`: this version's names, or those of older versions (untagged; exports' new-/old-/8 chars)
TEMP_SUFFIX = (r"(?:(?:(?P<host>[A-Za-z0-9-]+)-(?P<pid>\d+)\.)?[A-Za-z0-9_]+\.(?P<kind>tmp|old)"
               r"|(?P<legacy>old|new)-.+|[a-z0-9_]{8})")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def temp_path(target: Path, kind: str = "tmp", token: str | None = None) -> Path:
    """Where this process stages `target` (`kind="tmp"`) or swaps it out to (`"old"`): beside it, so one
    rename on the same file system puts it in place. `token` is the random part (default: 8 hex digits)."""
    return target.with_name(f".{target.name}.{HOST}-{os.getpid()}.{token or secrets.token_hex(4)}.{kind}")


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """`with atomic_file(p) as f: f.write(...)`: `p` appears only if the block finishes without error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_dead_writers(path.parent)
    tmp = temp_path(path)
    try:
        with open(tmp, "xb") as f:  # a plain open's mode, 0666 less the umask (shared runs and caches)
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_same_file(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """`target` becomes the finished file `source`'s bytes without writing them again: a hard link (a copy
    where the file system has none), staged under a temp name and renamed into place, so a reader sees the old
    `target` or the new one. Later atomic writes to either name replace that name only (a rename never
    changes the shared file)."""
    source, target = Path(source), Path(target)
    sweep_dead_writers(target.parent)
    tmp = temp_path(target)
    try:
        try:
            os.link(source, tmp)
        except OSError:  # no hard links here (some network and FAT file systems): the bytes, copied
            tmp.unlink(missing_ok=True)
            shutil.copyfile(source, tmp)
            fsync_path(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through `atomic_file`."""
    with atomic_file(path) as f:
        f.write(data)


def atomic_write_json(path: str | os.PathLike, obj: object) -> None:
    """``obj`` as indented UTF-8 JSON, written through `atomic_file`."""
    atomic_write_bytes(path, json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8"))


def default_mode(path: str | os.PathLike, *, directory: bool = False) -> None:
    """Give `path` the mode a plain open() or mkdir() would (0666 / 0777 less the umask): safetensors creates
    0600, which hides exports from everyone else who reads checkpoints."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's data, or a folder's entries (the renames done in it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def staging_folder(target: Path) -> Path:
    """A new empty folder to build `target` in, beside it, with the mode a plain mkdir gives."""
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_dead_writers(target.parent)
    staging = temp_path(target)
    staging.mkdir()
    return staging


def publish_folder(staging: Path, target: Path, *, keep: Callable[[Path], bool] | None = None) -> None:
    """Put the complete folder `staging` at `target`. A folder already there is swapped out and deleted,
    unless `keep(target)` says it is as good (another writer's copy of the same cache entry): then `staging`
    goes. On Linux the swap is one atomic exchange; elsewhere the old folder is renamed aside first, and a
    kill before the new one is renamed in leaves the target missing until `sweep` puts the old one back."""
    for root, _dirs, files in os.walk(staging):  # every file and folder on disk before the rename
        for path in [*(os.path.join(root, name) for name in files), root]:
            fsync_path(path)
    old = None
    try:
        os.rename(staging, target)  # no target yet
    except OSError:
        if not target.is_dir():
            raise
        if keep is not None and keep(target):
            remove_tree(staging)
            return
        if exchange(staging, target):
            old = staging
        else:
            old = temp_path(target, "old")
            os.rename(target, old)
            try:
                os.rename(staging, target)
            except BaseException:
                os.rename(old, target)
                raise
    fsync_path(target.parent)
    if old is not None:
        remove_tree(old)


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux `renameat2(RENAME_EXCHANGE)`); False where the system or
    the file system cannot."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd, rename_exchange = -100, 2
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def discard(path: Path) -> None:
    """Delete a file or folder zoo wrote: renamed to a temporary name first, so a kill half way leaves a
    leftover `sweep` knows, never half of it under its own name."""
    aside = temp_path(path)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another process discarded it first
    remove_tree(aside)


def remove_tree(path: Path) -> None:
    """Delete a file or a folder zoo wrote, read-only sub-folders included; what cannot go is left for the
    next sweep. A link is never followed."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)  # a file, or a link (removed, never followed)
        return
    for root, _dirs, _files in os.walk(path):
        os.chmod(root, os.lstat(root).st_mode | stat.S_IRWXU)
    shutil.rmtree(path, ignore_errors=True)


def sweep_dead_writers(folder: Path) -> list[Path]:
    """What killed processes of this host left in `folder` under this version's temp names, for any target
    (`sweep`, shared): run whenever zoo writes into a folder, so a kill -9 during a write (a best checkpoint
    in a run folder no later run sweeps) is cleaned up by the next write there. Live writers' temps stay."""
    try:
        return sweep(folder, ".+?", shared=True, hosts=(HOST,))  # the shortest name: the host tag is its own
    except OSError:  # a folder zoo may write in but not list, or a temp that cannot go: the write goes on
        return []


def sweep(folder: Path, names: str, *, shared: bool, contents: Collection[str] | None = None,
          hosts: Collection[str] | None = None) -> list[Path]:
    """Delete the temporaries killed writers left in `folder` for the targets whose names match the regex
    `names`, and put back the newest swapped-out folder of a target that is missing. `shared`: other
    processes write there too (a data cache, a runs folder), so a temp goes only once its writer is gone
    (`writer_gone`); otherwise (one target a user named) every leftover goes now. `contents`: a folder goes
    only if it holds nothing beyond these names, so a user's look-alike folder stays. `hosts`: only temps
    named by writers of these hosts (never an untagged, older name). Returns what went."""
    if not folder.is_dir():
        return []
    pattern, now = re.compile(rf"\.(?P<name>{names})\.{TEMP_SUFFIX}"), time.time()
    found = [(p, m) for p in folder.iterdir()  # older versions' export names are folders
             if (m := pattern.fullmatch(p.name)) and not p.is_symlink() and (m["kind"] or p.is_dir())
             and (hosts is None or m["host"] in hosts)
             and (not shared or writer_gone(p, m["host"], m["pid"], now))]
    olds = sorted(((p, m) for p, m in found if "old" in (m["kind"], m["legacy"]) and p.is_dir()),
                  key=lambda pm: pm[0].lstat().st_ctime)
    for path, match in reversed(olds):
        if not os.path.lexists(folder / match["name"]):  # a swap killed between its two renames
            os.rename(path, folder / match["name"])
    removed = [p for p, _ in found if os.path.lexists(p) and (
        contents is None or not p.is_dir() or {c.name for c in p.iterdir()} <= set(contents))]
    for path in removed:
        remove_tree(path)
    return removed


def writer_gone(path: Path, host: str | None, pid: str | None, now: float) -> bool:
    """Whether the process that wrote temp `path` is gone: a live process on this host keeps its temps; a dead
    one's go after a short idle time; another host's (or an untagged, older name's) after an hour without any
    change under it."""
    try:
        idle = now - newest_mtime(path)
    except FileNotFoundError:  # swept by another process just now
        return False
    if host == HOST and pid is not None:
        return not pid_alive(int(pid)) and idle > DEAD_OWNER_GRACE_S
    return idle > STALE_AFTER_S


def newest_mtime(path: Path) -> float:
    """The latest modification time of `path` or anything under it (a writer touches the file it writes)."""
    newest = path.lstat().st_mtime
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except FileNotFoundError:
                pass
    return newest


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True
