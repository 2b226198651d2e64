from __future__ import annotations

import numpy as np
import pytest

import zoo.data.cache as cache
from zoo.data.cache import RaggedIds, atomic_write_bytes, hash_texts, id_dtype, stable_hash


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    path = tmp_path / "x.bin"
    atomic_write_bytes(path, b"one")
    atomic_write_bytes(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]


def test_atomic_write_gives_the_permissions_of_a_plain_write(tmp_path):
    """mkstemp creates 0600 files: checkpoints and cache entries would be unreadable to the rest of a team."""
    atomic_write_bytes(tmp_path / "atomic.bin", b"x")
    (tmp_path / "plain.bin").write_bytes(b"x")
    assert (tmp_path / "atomic.bin").stat().st_mode & 0o777 == (tmp_path / "plain.bin").stat().st_mode & 0o777


def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "x.bin"
    atomic_write_bytes(path, b"old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]


def test_id_dtype():
    assert id_dtype(65536) == np.uint16
    assert id_dtype(65537) == np.uint32


@pytest.mark.parametrize("vocab_size", [500, 100_000])
def test_ragged_round_trip_through_memmap(tmp_path, vocab_size):
    rows = [[1, 2, 3], [], [vocab_size - 1]]
    ragged = RaggedIds.from_rows(rows, id_dtype(vocab_size))
    ragged.save(tmp_path, "split")
    loaded = RaggedIds.load(tmp_path, "split", id_dtype(vocab_size))
    assert isinstance(loaded.ids, np.memmap)
    assert [loaded[i].tolist() for i in range(len(loaded))] == rows
    assert (tmp_path / "split.ids.bin").stat().st_size == 4 * id_dtype(vocab_size).itemsize


def test_ragged_load_detects_truncation(tmp_path):
    RaggedIds.from_rows([[1, 2, 3]], np.dtype(np.uint16)).save(tmp_path, "s")
    (tmp_path / "s.ids.bin").write_bytes(b"\x01\x00")
    with pytest.raises(ValueError, match="corrupt cache entry"):
        RaggedIds.load(tmp_path, "s", np.dtype(np.uint16))


def test_hashes():
    assert stable_hash({"a": 1, "b": 2}) == stable_hash({"b": 2, "a": 1})
    assert hash_texts(["ab", "c"]) != hash_texts(["a", "bc"])
