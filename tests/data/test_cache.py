from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo.data.cache as cache
from zoo.atomic import atomic_write_bytes
from zoo.data.cache import RaggedIds, hash_texts, id_dtype, stable_hash


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


# ------------------------------------------------------------------------------ leftovers and wedges


def _build(cache_dir, **kw):
    from zoo.tasks import build_data

    from .conftest import SMALL_BPE, SMALL_TOY

    return build_data(SMALL_TOY, SMALL_BPE, task="seq2seq", max_seq_len=16, batch_size=4, cache_dir=cache_dir,
                      **kw)


def _entry(cache_dir):
    (entry,) = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    return entry


def test_entry_folder_without_its_manifest_is_rebuilt(cache_dir):
    """An interrupted copy of an entry used to wedge every later run with `OSError: Directory not empty`."""
    tok, _ = _build(cache_dir)
    entry = _entry(cache_dir)
    (entry / "manifest.json").unlink()
    tok2, _ = _build(cache_dir)
    assert (entry / "manifest.json").is_file() and tok2.encode("a b c") == tok.encode("a b c")
    assert [p.name for p in cache_dir.iterdir()] == [entry.name]  # nothing left beside it


def test_entry_with_a_file_cut_short_is_rebuilt(cache_dir):
    _, before = _build(cache_dir)
    before.setup("fit")
    train = before.datasets["train"]
    # copied: no memmap
    reference = [{k: v.clone() for k, v in train[i].items()} for i in (0, len(train) - 1)]
    n_examples = len(train)
    del before, train
    offsets = _entry(cache_dir) / "train.src.offsets.bin"
    complete = offsets.read_bytes()
    offsets.write_bytes(complete[:-8])  # a copy interrupted after the manifest
    _, dm = _build(cache_dir)
    dm.setup("fit")
    assert offsets.read_bytes() == complete  # rebuilt byte for byte
    train = dm.datasets["train"]
    assert len(train) == n_examples
    for i, expected in zip((0, n_examples - 1), reference, strict=True):
        assert all(torch.equal(train[i][k], v) for k, v in expected.items())
    assert [p.name for p in cache_dir.iterdir()] == [_entry(cache_dir).name]


def _temp(cache_dir, name, age_s):
    path = cache_dir / name
    (path / "tokenizer").mkdir(parents=True)
    (path / "tokenizer" / "tokenizer.json").write_text("{}")
    old = time.time() - age_s
    for p in (path / "tokenizer" / "tokenizer.json", path / "tokenizer", path):
        os.utime(p, (old, old))
    return path


def test_stale_temps_of_killed_builds_are_removed_live_ones_kept(cache_dir):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    # temp names: .<key16>.<host>-<pid>.<random>.tmp
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())
    key, me, there = "0123456789abcdef", f"{host}-{os.getpid()}", "otherhost-7"
    kept = [_temp(cache_dir, f".{key}.{me}.abcd1234.tmp", age_s=86400),  # this live process: never stale
            _temp(cache_dir, f".{key}.{host}-{dead.pid}.abcd1234.tmp", age_s=5),  # dead, but just now
            _temp(cache_dir, f".{key}.{there}.abcd1234.tmp", age_s=600),  # another machine, 10 min ago
            _temp(cache_dir, f".{key}.k2j_x9ab.tmp", age_s=600),  # an older zoo's name, 10 min ago
            _temp(cache_dir, ".notes.tmp", age_s=86400)]  # not a zoo name
    gone = [_temp(cache_dir, f".{key}.{host}-{dead.pid}.efgh5678.tmp", age_s=120),
            _temp(cache_dir, f".{key}.{there}.efgh5678.tmp", age_s=7200),
            _temp(cache_dir, f".{key}.k2j_x9cd.tmp", age_s=7200)]
    _build(cache_dir)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in gone)


@pytest.mark.parametrize("bad", ["file", "read_only", "under_a_file"])
def test_unusable_cache_dir_env_is_one_error_naming_it_before_any_work(tmp_path, monkeypatch, bad):
    target = {"file": tmp_path / "f", "read_only": tmp_path / "ro",
              "under_a_file": tmp_path / "f" / "cache"}[bad]
    (tmp_path / "f").write_text("not a folder")
    (tmp_path / "ro").mkdir(mode=0o555)
    if os.geteuid() == 0:  # root writes anywhere; let os.access answer as it does for everyone else
        real = os.access
        monkeypatch.setattr(cache.os, "access", lambda p, mode: real(p, mode) and Path(p) != tmp_path / "ro")
    monkeypatch.setenv("ZOO_CACHE_DIR", str(target))

    def no_work(*args, **kwargs):
        raise AssertionError("data read before the cache folder was checked")

    monkeypatch.setattr("zoo.data.build.load_source", no_work)
    with pytest.raises(ValueError,
                       match=rf"^ZOO_CACHE_DIR={re.escape(str(target))}: "
                             r".*(not a folder|not writable|cannot create)"):
        _build(None)


def test_an_entry_of_format_4_is_not_reused_so_the_chat_template_is_kept(cache_dir, tmp_path, monkeypatch):
    """Format 4 saved the cached tokenizer without its chat template, under the same key
    (tokenizer_config.json hashed as before): a run that hit such an entry lost a folder's template
    silently."""
    import zoo.data.build
    from zoo.tasks import build_data
    from zoo.tokenizers import build_tokenizer

    corpus = tmp_path / "c.txt"
    corpus.write_text("the zebra runs under a blue river\n" * 50, encoding="utf-8")
    folder = build_tokenizer({"name": "char"},
                             ["the zebra runs under a blue river\n"]).save_hf(tmp_path / "hf")
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}),
                                                  encoding="utf-8")

    def run():
        return build_data({"name": "text", "files": str(corpus)}, {"name": "hf", "path": str(folder)},
                          task="lm", max_seq_len=16, batch_size=4, cache_dir=cache_dir)[0]

    with monkeypatch.context() as m:  # an entry as format 4 published it: its tokenizer without the template
        m.setattr(zoo.data.build, "CACHE_FORMAT_VERSION", 4)
        assert run().chat_template == template
    old = _entry(cache_dir)
    meta = json.loads((old / "tokenizer" / "zoo_tokenizer.json").read_text(encoding="utf-8"))
    del meta["chat_template"]
    (old / "tokenizer" / "zoo_tokenizer.json").write_text(json.dumps(meta), encoding="utf-8")
    assert run().chat_template == template
    assert len([p for p in cache_dir.iterdir() if not p.name.startswith(".")]) == 2  # a new entry beside it
