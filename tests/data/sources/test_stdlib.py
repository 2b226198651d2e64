from __future__ import annotations

from zoo.data.sources.stdlib import EXCLUDED_DIRS, load_stdlib_text, stdlib_files, stdlib_root


def test_files_are_sorted_python_sources_outside_site_packages():
    root = stdlib_root()
    files = stdlib_files(root)
    rel = [p.relative_to(root).as_posix() for p in files]
    assert rel == sorted(rel)
    assert all(r.endswith(".py") for r in rel)
    assert not any(part in EXCLUDED_DIRS for r in rel for part in r.split("/")[:-1])
    assert "argparse.py" in rel


def test_cap_deterministic_and_split_by_file():
    a = load_stdlib_text(max_bytes=120_000)
    b = load_stdlib_text(max_bytes=120_000)
    assert a == b
    size = sum(len(t.encode()) for t in a.train + a.val)
    assert 110_000 < size <= 120_000  # the last file is cut at a line boundary
    assert a.train and a.val
    assert not set(a.train) & set(a.val)


def test_split_does_not_depend_on_cap():
    small = load_stdlib_text(max_bytes=80_000)
    large = load_stdlib_text(max_bytes=200_000)
    for split in ("train", "val"):
        for text in getattr(small, split):  # same split in both, possibly cut shorter by the cap
            assert any(big.startswith(text) for big in getattr(large, split)), split


def test_bad_cap():
    import pytest

    with pytest.raises(ValueError, match=r"data.max_bytes=0 must be a positive int or null"):
        load_stdlib_text(max_bytes=0)
