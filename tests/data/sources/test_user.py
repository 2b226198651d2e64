from __future__ import annotations

import json

import pytest

from zoo.data.sources.base import load_source
from zoo.data.sources.user import load_classification, load_pairs, load_text


def test_text_split_per_file(tmp_path):
    for name in "ab":
        (tmp_path / f"{name}.txt").write_text("".join(f"{name} line {i}\n" for i in range(20)))
    corpus = load_text(files=str(tmp_path / "*.txt"), val_fraction=0.1)
    assert len(corpus.train) == len(corpus.val) == 2
    assert corpus.train[0] + corpus.val[0] == (tmp_path / "a.txt").read_text()
    assert corpus.val[0] == "a line 18\na line 19\n"


def test_pairs_seeded_split(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("".join(f"s{i}\tt{i}\n" for i in range(30)))
    a = load_pairs(path=str(path), val_fraction=0.2, seed=3)
    assert a == load_pairs(path=str(path), val_fraction=0.2, seed=3)
    assert len(a.val) == 6 and len(a.train) == 24 and not set(a.val) & set(a.train)
    assert a.test == []


def test_classification_label_ids(tmp_path):
    path = tmp_path / "l.jsonl"
    labels = [10, 2, 2, 10, 1, 1, 2, 10, 1, 2]
    path.write_text("\n".join(json.dumps({"text": f"t{i}", "label": y}) for i, y in enumerate(labels)))
    corpus = load_classification(path=str(path), val_fraction=0.2)
    assert corpus.label_names == ["1", "2", "10"]  # numeric labels sort numerically
    names = {text: corpus.label_names[y] for text, y in corpus.train + corpus.val}
    assert names == {f"t{i}": str(y) for i, y in enumerate(labels)}


def test_single_class_rejected(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": "x"}\n')
    with pytest.raises(ValueError, match="single label"):
        load_classification(path=str(path))


def test_source_config_validation():
    with pytest.raises(ValueError, match=r"data.name: Unknown data source 'wiki'. Allowed: "):
        load_source({"name": "wiki"}, seed=0)
    with pytest.raises(ValueError,
                       match=r"Unknown key 'data.max_byte' \(data=stdlib_text\). "
                             r"Did you mean 'data.max_bytes'"):
        load_source({"name": "stdlib_text", "max_byte": 10}, seed=0)
    with pytest.raises(ValueError, match=r"data=text needs data.files"):
        load_source({"name": "text"}, seed=0)
