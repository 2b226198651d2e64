"""Shared tiny configs: keep every data test small (2 shared CPU cores)."""

from __future__ import annotations

import pytest

SMALL_STDLIB = {"name": "stdlib_text", "max_bytes": 150_000, "val_fraction": 0.1}
SMALL_BPE = {"name": "bpe", "vocab_size": 320, "min_frequency": 2}
SMALL_TOY = {"name": "translation_toy", "n_pairs": 400, "n_test": 50}


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"
