"""zoo/atomic.py: a file or folder appears whole or not at all, with the mode a plain open()/mkdir() gives,
and what a killed swap leaves is put back (the old folder) or removed (staging), never a user's folder nor a
live writer's temp."""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
import sys
import time

import pytest

import zoo.atomic
from zoo.atomic import (
    HOST,
    atomic_file,
    atomic_same_file,
    atomic_write_bytes,
    default_mode,
    discard,
    exchange,
    publish_folder,
    remove_tree,
    staging_folder,
    sweep,
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _folder(path, files: dict[str, str]):
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _tree(path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_atomic_file_replaces_the_target_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "out.bin"
    with atomic_file(target) as f:
        f.write(b"first")
    with atomic_file(target) as f:
        f.write(b"second")
        assert target.read_bytes() == b"first"  # a reader sees the old bytes until the block ends
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.bin"]
    assert _mode(target) == 0o666 & ~_umask()  # not mkstemp's 0600


def test_atomic_file_error_keeps_the_old_file_and_removes_the_temp(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"), atomic_file(target) as f:
        f.write(b"half")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_default_mode_is_what_open_and_mkdir_give(tmp_path):
    plain_file, plain_dir = tmp_path / "plain", tmp_path / "plain_dir"
    plain_file.write_text("x")
    plain_dir.mkdir()
    made_file, made_dir = tmp_path / "made", tmp_path / "made_dir"
    made_file.write_text("x")
    made_dir.mkdir()
    os.chmod(made_file, 0o600)
    os.chmod(made_dir, 0o700)
    default_mode(made_file)
    default_mode(made_dir, directory=True)
    assert _mode(made_file) == _mode(plain_file) == 0o666 & ~_umask()
    assert _mode(made_dir) == _mode(plain_dir) == 0o777 & ~_umask()


def test_staging_folder_is_a_fresh_sibling_with_the_default_mode(tmp_path):
    target = tmp_path / "parent" / "export"
    staging = staging_folder(target)
    assert staging.parent == target.parent and staging.name.startswith(f".export.{HOST}-{os.getpid()}.")
    assert list(staging.iterdir()) == [] and _mode(staging) == 0o777 & ~_umask()
    assert staging_folder(target) != staging


@pytest.mark.parametrize("can_exchange", [True, False], ids=["exchange", "rename-aside"])
def test_publish_folder_replaces_the_target_and_removes_the_old_one(tmp_path, monkeypatch, can_exchange):
    if not can_exchange:
        monkeypatch.setattr(zoo.atomic, "exchange", lambda a, b: False)
    target = _folder(tmp_path / "export", {"a.txt": "old", "gone.txt": "old"})
    publish_folder(_folder(tmp_path / ".export.new-1", {"a.txt": "new"}), target)
    assert _tree(target) == {"a.txt": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no staging, no old folder left
    publish_folder(_folder(tmp_path / ".fresh.new-1", {"b.txt": "b"}), tmp_path / "fresh")  # no target yet
    assert _tree(tmp_path / "fresh") == {"b.txt": "b"}


def test_failed_rename_in_puts_the_old_folder_back(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo.atomic, "exchange", lambda a, b: False)
    target = _folder(tmp_path / "export", {"a.txt": "old"})
    staging = _folder(tmp_path / ".export.new-1", {"a.txt": "new"})
    real_rename = os.rename

    def rename(src, dst):
        if os.fspath(src) == os.fspath(staging):
            raise OSError("disk gone")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="disk gone"):
        publish_folder(staging, target)
    assert _tree(target) == {"a.txt": "old"}


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2 is Linux-only")
def test_exchange_swaps_two_folders_in_place(tmp_path):
    a = _folder(tmp_path / "a", {"x": "from a"})
    b = _folder(tmp_path / "b", {"x": "from b"})
    if not exchange(a, b):
        pytest.skip("this file system cannot exchange")
    assert _tree(a) == {"x": "from b"} and _tree(b) == {"x": "from a"}


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2 is Linux-only")
def test_exchange_error_other_than_unsupported_is_raised(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        exchange(tmp_path / "missing", _folder(tmp_path / "b", {}))


def test_sweep_puts_back_the_newest_old_folder_when_the_target_is_missing(tmp_path):
    target = tmp_path / "export"
    older = _folder(tmp_path / ".export.old-aaaa", {"config.json": "older"})
    newer = _folder(tmp_path / ".export.old-bbbb", {"config.json": "newer"})
    time.sleep(0.05)
    os.chmod(newer, _mode(newer))  # a later ctime than `older`'s, whatever the clock's resolution
    staging = _folder(tmp_path / ".export.new-cccc", {"config.json": "half"})
    legacy = _folder(tmp_path / ".export.abcd1234", {"config.json": "older zoo's staging"})
    sweep(tmp_path, "export", shared=False, contents=["config.json", "model.safetensors"])
    assert _tree(target) == {"config.json": "newer"}
    assert not older.exists() and not staging.exists() and not legacy.exists()


def test_sweep_keeps_the_target_and_any_folder_holding_other_files(tmp_path):
    target = _folder(tmp_path / "export", {"config.json": "current"})
    aside = _folder(tmp_path / ".export.old-aaaa", {"config.json": "old"})
    users = _folder(tmp_path / ".export.new-mine", {"config.json": "x", "notes.txt": "a user's file"})
    other = _folder(tmp_path / ".other.new-1", {"config.json": "another target's"})
    sweep(tmp_path, "export", shared=False, contents=["config.json"])
    assert _tree(target) == {"config.json": "current"}
    assert not aside.exists()  # the target is there: the old copy is a leftover
    assert users.exists() and other.exists()


def test_remove_tree_deletes_read_only_folders_but_never_follows_a_link(tmp_path):
    keep = _folder(tmp_path / "keep", {"k": "kept"})
    tree = _folder(tmp_path / "tree", {})
    inner = _folder(tree / "inner", {"f": "x"})
    os.chmod(inner, 0o500)
    remove_tree(tree)
    assert not tree.exists()
    link = tmp_path / "link"
    link.symlink_to(keep, target_is_directory=True)
    remove_tree(link)
    assert _tree(keep) == {"k": "kept"}


def test_publish_folder_keeps_an_equal_target_when_told(tmp_path):
    """A data-cache entry another build published first is kept (same key, same content); one without its
    manifest is replaced."""
    complete = lambda folder: (folder / "manifest.json").is_file()  # noqa: E731
    target = _folder(tmp_path / "entry", {"manifest.json": "theirs"})
    publish_folder(_folder(tmp_path / ".entry.x.tmp", {"manifest.json": "mine"}), target, keep=complete)
    assert _tree(target) == {"manifest.json": "theirs"} and sorted(os.listdir(tmp_path)) == ["entry"]
    (target / "manifest.json").unlink()
    publish_folder(_folder(tmp_path / ".entry.y.tmp", {"manifest.json": "mine"}), target, keep=complete)
    assert _tree(target) == {"manifest.json": "mine"} and sorted(os.listdir(tmp_path)) == ["entry"]


def _aged(path, age_s: float):
    path.write_bytes(b"x")
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def test_shared_sweep_removes_only_temps_whose_writer_is_gone(tmp_path):
    """Checkpoint temps in a runs folder: this process's and a live one's stay, a dead process's go after a
    minute, another host's and an older zoo's untagged names after an hour; other names never."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me, ghost = f"{HOST}-{os.getpid()}", f"{HOST}-{dead.pid}"
    kept = [_aged(tmp_path / f".last.ckpt.{me}.aaaa1111.tmp", 86400),
            _aged(tmp_path / f".last.ckpt.{ghost}.bbbb2222.tmp", 5),
            _aged(tmp_path / ".last.ckpt.otherhost-7.cccc3333.tmp", 600),
            _aged(tmp_path / ".best.ckpt.q8w3e4rt.tmp", 600),
            _aged(tmp_path / ".notes.tmp", 86400), _aged(tmp_path / ".notes.txt.k2j_x9ab.tmp", 86400)]
    gone = [_aged(tmp_path / f".last.ckpt.{ghost}.dddd4444.tmp", 120),
            _aged(tmp_path / ".last.ckpt.otherhost-7.eeee5555.tmp", 7200),
            _aged(tmp_path / ".last.ckpt.k2j_x9ab.tmp", 7200)]
    assert sorted(sweep(tmp_path, r".+\.ckpt", shared=True)) == sorted(gone)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in gone)


def test_discard_leaves_nothing_under_the_name_or_beside_it(tmp_path):
    entry = _folder(tmp_path / "0123456789abcdef", {"a.bin": "x"})
    discard(entry)
    discard(entry)  # gone already: nothing to do
    assert os.listdir(tmp_path) == []


def test_temp_names_are_what_sweep_matches(tmp_path):
    with atomic_file(tmp_path / "best.ckpt") as f:
        (temp,) = [p.name for p in tmp_path.iterdir()]
        f.write(b"x")
    assert re.fullmatch(rf"\.best\.ckpt\.{HOST}-{os.getpid()}\.[0-9a-f]{{8}}\.tmp", temp)


@pytest.mark.parametrize("write", ["file", "folder"])
def test_a_write_sweeps_what_dead_writers_of_this_host_left_in_its_folder(tmp_path, write):
    """A kill -9 during a write (a best checkpoint, a sharded one's staging folder) leaves a temp that no
    later run's start-up sweep may reach (a run folder of its own); the next write into that folder removes
    it once its writer is gone. This process's temps (a live writer), another host's and a user's look-alike
    stay."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me, ghost = f"{HOST}-{os.getpid()}", f"{HOST}-{dead.pid}"
    staged = tmp_path / f".last.ckpt.{ghost}.ffff6666.tmp"
    _folder(staged, {"meta.pt": "half"})
    os.utime(staged / "meta.pt", (time.time() - 120, time.time() - 120))
    os.utime(staged, (time.time() - 120, time.time() - 120))
    gone = [_aged(tmp_path / f".best.ckpt.{ghost}.bbbb2222.tmp", 120), staged]
    kept = [_aged(tmp_path / f".best.ckpt.{me}.aaaa1111.tmp", 86400),
            _aged(tmp_path / f".best.ckpt.{ghost}.cccc3333.tmp", 5),  # not idle a minute yet
            _aged(tmp_path / ".best.ckpt.otherhost-7.dddd4444.tmp", 600),
            _aged(tmp_path / ".notes.txt.k2j_x9ab.tmp", 86400)]
    if write == "file":
        atomic_write_bytes(tmp_path / "best.ckpt", b"new")
    else:
        remove_tree(staging_folder(tmp_path / "last.ckpt"))
    assert not any(os.path.lexists(p) for p in gone) and all(p.exists() for p in kept)


@pytest.mark.parametrize("links", [True, False])
def test_atomic_same_file_shares_the_bytes_and_later_writes_replace_one_name(tmp_path, monkeypatch, links):
    """last.ckpt = best.ckpt's bytes without a second write: a hard link where the file system has them (one
    inode), else a copy; the old target is replaced whole, no temp is left, and a later atomic write to one
    name leaves the other's bytes as they were."""
    source, target = tmp_path / "best.ckpt", tmp_path / "last.ckpt"
    source.write_bytes(b"step 6")
    target.write_bytes(b"step 3, older")
    if not links:
        def no_links(*args):
            raise OSError(errno.EPERM, "hard links are not supported here")
        monkeypatch.setattr(os, "link", no_links)
    atomic_same_file(source, target)
    assert target.read_bytes() == b"step 6" and os.path.samefile(source, target) is links
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "last.ckpt"]
    with atomic_file(target) as f:
        f.write(b"step 9")
    assert target.read_bytes() == b"step 9" and source.read_bytes() == b"step 6"
