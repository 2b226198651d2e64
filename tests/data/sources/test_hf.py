"""data=hf on datasets built here (nothing downloaded): a save_to_disk folder, json and parquet files and a
streaming dataset, for every task; and the errors for bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

from zoo.data.pretokenize import encode_documents  # noqa: E402
from zoo.data.sources.base import load_source  # noqa: E402
from zoo.tasks import build_data  # noqa: E402

from ..conftest import SMALL_BPE  # noqa: E402

KW = dict(max_seq_len=16, batch_size=4, seed=0)
WORDS = "the cat sat on a mat and ate some fish while the dog slept by the warm fire".split()


def sentence(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(5 + i % 6))


def rows(n: int = 60) -> list[dict]:
    return [{"text": sentence(i), "src": sentence(i), "tgt": sentence(i + 3), "label": ["neg", "pos"][i % 2],
             "n": i} for i in range(n)]


@pytest.fixture(autouse=True)
def offline_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")


@pytest.fixture
def saved(tmp_path):
    """A DatasetDict with train and validation splits, written by save_to_disk."""
    folder = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows(60)),
                          "validation": datasets.Dataset.from_list(rows(12))}).save_to_disk(str(folder))
    return folder


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    return path


@pytest.fixture
def parquet(tmp_path):
    path = tmp_path / "d.parquet"
    datasets.Dataset.from_list(rows()).to_parquet(str(path))
    return path


def test_text_from_saved_folder_equals_the_column_encoded_in_memory(saved, cache_dir):
    cfg = {"name": "hf", "path": str(saved), "val_split": "validation"}
    tok, dm = build_data(cfg, SMALL_BPE, task="lm", cache_dir=cache_dir, **KW)
    train = [r["text"] for r in rows(60)]
    np.testing.assert_array_equal(dm.streams["train"], encode_documents(tok, train, append_eos=True).ids)
    val = [r["text"] for r in rows(12)]
    np.testing.assert_array_equal(dm.streams["val"], encode_documents(tok, val, append_eos=True).ids)


@pytest.mark.parametrize("source", ["jsonl", "parquet"])
def test_files_give_the_same_seeded_split_streaming_or_not(source, request):
    path = request.getfixturevalue(source)
    eager = load_source({"name": "hf", "path": str(path)}, seed=3, kind="text")
    lazy = load_source({"name": "hf", "path": str(path), "streaming": True}, seed=3, kind="text")
    assert eager.train == lazy.train and eager.val == lazy.val
    texts = [r["text"] for r in rows()]
    # a split of every row, both non-empty
    assert sorted(eager.train + eager.val) == sorted(texts) and eager.val
    assert eager.documents()["train"].fingerprint() == lazy.documents()["train"].fingerprint()
    other = load_source({"name": "hf", "path": str(path)}, seed=4, kind="text")
    assert other.val != eager.val


def test_streaming_dataset_trains_lm_through_build_data(jsonl, cache_dir):
    cfg = {"name": "hf", "path": str(jsonl), "streaming": True}
    tok, dm = build_data(cfg, SMALL_BPE, task="lm", cache_dir=cache_dir, **KW)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 16) and int(batch["input_ids"].max()) < tok.vocab_size


def test_mlm_seq2seq_and_classification(saved, parquet, cache_dir):
    _, mlm = build_data({"name": "hf", "path": str(parquet)}, SMALL_BPE, task="mlm", cache_dir=cache_dir,
                        **KW)
    assert "labels" in next(iter(mlm.train_dataloader()))
    cfg = {"name": "hf", "path": str(saved), "val_split": "validation"}
    tok, s2s = build_data(cfg, SMALL_BPE, task="seq2seq", cache_dir=cache_dir, **KW)
    src, tgt = s2s.pairs["train"]
    assert len(src) == 60 and tok.decode(src[5]) == sentence(5) and tok.decode(tgt[5]) == sentence(8)
    tok, cls = build_data(cfg, SMALL_BPE, task="classification", cache_dir=cache_dir, **KW)
    texts, labels = cls.examples["val"]
    assert tok.label_names == ["neg", "pos"] and labels.tolist() == [i % 2 for i in range(12)]
    assert tok.decode(texts[3]) == sentence(3)


def test_class_label_column_keeps_its_names(tmp_path):
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["sports", "arts"])})
    ds = datasets.Dataset.from_dict({"text": [sentence(i) for i in range(20)],
                                     "label": [i % 2 for i in range(20)]},
                                    features=features)
    ds.save_to_disk(str(tmp_path / "cl"))
    corpus = load_source({"name": "hf", "path": str(tmp_path / "cl")}, seed=0, kind="labelled")
    assert corpus.label_names == ["arts", "sports"]
    named = {t: corpus.label_names[y] for t, y in corpus.train + corpus.val}
    assert named[sentence(0)] == "sports" and named[sentence(1)] == "arts"


@pytest.mark.parametrize("cfg, kind, match", [
    ({"text_field": "body"}, "text",
     r"data.text_field='body': .* has no such column; its columns: \['label', 'n', 'src'"),
    ({"text_field": "n"}, "text", r"data.text_field='n': column 'n' of .* holds int64, not text"),
    ({"src_field": "source"}, "pairs", r"data.src_field='source': .* no such column"),
    ({"label_field": "y"}, "labelled", r"data.label_field='y': .* no such column"),
    ({"val_split": "test"}, "text",
     r"data.val_split='test': .* has no such split; its splits: \['train', 'validation'\]"),
    ({"train_split": "nope"}, "text", r"data.train_split='nope': .* no such split"),
    ({"format": "xml"}, "text", r"data.format='xml' is unknown; allowed: \['auto', 'disk'"),
])
def test_bad_config_is_one_clear_error(saved, cfg, kind, match):
    with pytest.raises(ValueError, match=match):
        load_source({"name": "hf", "path": str(saved), **cfg}, seed=0, kind=kind)


def test_empty_split_and_bad_values_are_errors(tmp_path, cache_dir):
    empty = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows(10)),
                                  "validation": datasets.Dataset.from_list([{"text": "  ", "n": 1}])})
    empty.save_to_disk(str(tmp_path / "e"))
    with pytest.raises(ValueError,
                       match=r"split 'validation' of .* has no rows with text in column 'text' .* empty"):
        build_data({"name": "hf", "path": str(tmp_path / "e"), "val_split": "validation"}, SMALL_BPE,
                   task="lm", cache_dir=cache_dir, **KW)
    mixed = tmp_path / "m.jsonl"  # a streaming reader sees no schema up front: the bad row is named when read
    mixed.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": 7}) + "\n")
    with pytest.raises(ValueError, match=r"row 1 of .* holds int 7, not text|holds int64, not text"):
        _ = load_source({"name": "hf", "path": str(mixed), "streaming": True}, seed=0, kind="text").train


def test_missing_path_and_unknown_suffix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data.path: glob .* matched no files"):
        load_source({"name": "hf", "path": str(tmp_path / "*.parquet")}, seed=0, kind="text")
    (tmp_path / "d.xyz").write_text("x")
    with pytest.raises(ValueError, match=r"data.format=auto cannot tell the format of"):
        load_source({"name": "hf", "path": str(tmp_path / "d.xyz")}, seed=0, kind="text")
    with pytest.raises(ValueError, match=r"data=hf needs data.path"):
        load_source({"name": "hf"}, seed=0, kind="text")


def no_label_dataset(folder, labels: list[int]):
    """A save_to_disk dataset whose ClassLabel column (names neg, pos) holds datasets' -1 ("no label") too."""
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["neg", "pos"])})
    ds = datasets.Dataset.from_dict({"text": [sentence(i) for i in range(len(labels))], "label": labels},
                                    features=features)
    ds.save_to_disk(str(folder))
    return folder


def test_class_label_minus_one_rows_are_dropped_counted_and_logged(tmp_path, cache_dir, caplog):
    """-1 is datasets' "no label", not a third class: those rows are left out and their count is logged."""
    labels = [[0, 1, -1][i % 3] for i in range(60)]
    cfg = {"name": "hf", "path": str(no_label_dataset(tmp_path / "cl", labels)), "val_fraction": 0.25}
    with caplog.at_level("WARNING", logger="zoo.data.sources.hf"):
        tok, dm = build_data(cfg, SMALL_BPE, task="classification", cache_dir=cache_dir, **KW)
    assert tok.label_names == ["neg", "pos"] and dm.num_labels == 2
    seen = {tok.decode(ids): int(y) for split in ("train", "val")
            for ids, y in zip(*dm.examples[split], strict=True)}
    # ids 0 neg, 1 pos: as named
    assert seen == {sentence(i): labels[i] for i in range(60) if labels[i] != -1}
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    counts = [int(m.split("dropped ")[1].split(" of")[0]) for m in dropped]
    # train and the held-out rows, each said
    assert sum(counts) == labels.count(-1) == 20 and len(dropped) == 2
    assert all("ClassLabel -1 (no label)" in m and "data.label_field='label'" in m for m in dropped)


def test_a_split_of_only_unlabelled_rows_is_refused_naming_the_column(tmp_path):
    folder = tmp_path / "d"
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["a", "b"])})
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"text": ["x y", "z w"], "label": [0, 1]}, features=features),
        "test": datasets.Dataset.from_dict({"text": ["x", "y"], "label": [-1, -1]}, features=features),
    }).save_to_disk(str(folder))
    with pytest.raises(ValueError,
                       match=r"split 'test' of .* has no labelled rows: all 2 rows hold ClassLabel -1 "
                             r"\(no label\) in column 'label' \(data.label_field\)"):
        load_source({"name": "hf", "path": str(folder), "val_split": "test"}, seed=0, kind="labelled")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name, content",
                         [("empty.jsonl", b""), ("blank.jsonl", b"\n  \n"), ("empty.txt", b""),
                          ("empty.csv", b"")])
def test_an_empty_file_is_named(tmp_path, name, content, streaming):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        load_source({"name": "hf", "path": str(path), "streaming": streaming}, seed=0,
                    kind="text").fingerprint()
    assert str(err.value).startswith(f"data.path: {path} is empty (no rows); ")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name, content, offset", [
    ("latin1.txt", b"hello\ncaf\xe9 au lait\n" * 3, 9),
    ("latin1.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n', 28),
    ("latin1.csv", b"text\nfine\ncaf\xe9\n", 13),
])
def test_a_file_that_is_not_utf8_names_the_byte_offset_like_data_text(tmp_path, name, content, offset,
                                                                      streaming):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=rf"data.path: {path}: not valid UTF-8 at byte offset {offset}: "):
        load_source({"name": "hf", "path": str(path), "streaming": streaming}, seed=0,
                    kind="text").fingerprint()


@pytest.mark.parametrize("kind, match", [
    ("text", r"split 'validation' of the dataset saved at .* has no rows with text in column 'text'"),
    ("labelled", r"split 'validation' of the dataset saved at .* has no rows; the split is empty"),
])
def test_an_empty_saved_split_is_named(tmp_path, kind, match):
    """datasets writes a split with no rows but cannot read it back (IndexError): the split is named
    instead."""
    folder = tmp_path / "d"
    datasets.DatasetDict({
        "train": datasets.Dataset.from_list(rows(10)),
        "validation": datasets.Dataset.from_list(rows(2)).select([])}).save_to_disk(str(folder))
    with pytest.raises(ValueError, match=match):
        load_source({"name": "hf", "path": str(folder), "val_split": "validation"}, seed=0,
                    kind=kind).fingerprint()
    held_out = load_source({"name": "hf", "path": str(folder), "val_fraction": 0.3}, seed=0, kind="text")
    # the empty split unused
    assert sorted(held_out.train + held_out.val) == sorted(r["text"] for r in rows(10))
