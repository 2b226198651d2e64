from __future__ import annotations

import importlib.util

import pytest

from zoo.data.sources.base import load_source


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="datasets is installed")
def test_hf_text_without_datasets_says_how_to_fix():
    with pytest.raises(ValueError, match=r"data=hf_text needs the optional 'datasets' package"):
        load_source({"name": "hf_text", "dataset": "wikitext"}, seed=0)


def test_hf_text_requires_dataset_name():
    with pytest.raises(ValueError, match=r"data=hf_text needs data.dataset"):
        load_source({"name": "hf_text"}, seed=0)
