"""zoo/atomic.py: a file or folder appears whole or not at all, with the mode a plain open()/mkdir() gives,
and what a killed swap leaves is put back (the old folder) or removed (staging), never a user's folder."""

from __future__ import annotations

import os
import stat
import sys
import time

import pytest

import zoo.atomic
from zoo.atomic import (
    atomic_file,
    default_mode,
    exchange,
    recover_folder,
    remove_tree,
    staging_folder,
    swap_folder,
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
    assert staging.parent == target.parent and staging.name.startswith(".export.new-")
    assert list(staging.iterdir()) == [] and _mode(staging) == 0o777 & ~_umask()
    assert staging_folder(target) != staging


@pytest.mark.parametrize("can_exchange", [True, False], ids=["exchange", "rename-aside"])
def test_swap_folder_replaces_the_target_and_removes_the_old_one(tmp_path, monkeypatch, can_exchange):
    if not can_exchange:
        monkeypatch.setattr(zoo.atomic, "exchange", lambda a, b: False)
    target = _folder(tmp_path / "export", {"a.txt": "old", "gone.txt": "old"})
    swap_folder(_folder(tmp_path / ".export.new-1", {"a.txt": "new"}), target)
    assert _tree(target) == {"a.txt": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no staging, no old folder left
    swap_folder(_folder(tmp_path / ".fresh.new-1", {"b.txt": "b"}), tmp_path / "fresh")  # no target yet
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
        swap_folder(staging, target)
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


def test_recover_folder_puts_back_the_newest_old_folder_when_the_target_is_missing(tmp_path):
    target = tmp_path / "export"
    older = _folder(tmp_path / ".export.old-aaaa", {"config.json": "older"})
    newer = _folder(tmp_path / ".export.old-bbbb", {"config.json": "newer"})
    time.sleep(0.05)
    os.chmod(newer, _mode(newer))  # a later ctime than `older`'s, whatever the clock's resolution
    staging = _folder(tmp_path / ".export.new-cccc", {"config.json": "half"})
    legacy = _folder(tmp_path / ".export.abcd1234", {"config.json": "older zoo's staging"})
    recover_folder(target, ["config.json", "model.safetensors"])
    assert _tree(target) == {"config.json": "newer"}
    assert not older.exists() and not staging.exists() and not legacy.exists()


def test_recover_folder_keeps_the_target_and_any_folder_holding_other_files(tmp_path):
    target = _folder(tmp_path / "export", {"config.json": "current"})
    aside = _folder(tmp_path / ".export.old-aaaa", {"config.json": "old"})
    users = _folder(tmp_path / ".export.new-mine", {"config.json": "x", "notes.txt": "a user's file"})
    other = _folder(tmp_path / ".other.new-1", {"config.json": "another target's"})
    recover_folder(target, ["config.json"])
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
