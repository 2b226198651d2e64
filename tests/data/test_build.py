from __future__ import annotations

import json
import os
import shutil

import pytest
from omegaconf import OmegaConf

from zoo.data import load_tokenizer, model_overrides
from zoo.tasks import build_data
from zoo.tokenizers import build_tokenizer

from .conftest import SMALL_BPE, SMALL_STDLIB, SMALL_TOY

KW = dict(max_seq_len=16, batch_size=4, seed=0)


def entries(cache_dir):
    return sorted(p for p in cache_dir.iterdir() if not p.name.startswith("."))


def test_second_call_hits_cache_without_retraining(cache_dir, monkeypatch):
    tok1, _ = build_data(SMALL_STDLIB, SMALL_BPE, task="lm", cache_dir=cache_dir, **KW)
    (entry,) = entries(cache_dir)
    mtimes = {p.name: p.stat().st_mtime_ns for p in entry.rglob("*")}

    def no_training(*args, **kwargs):
        raise AssertionError("tokenizer retrained on a cache hit")

    monkeypatch.setattr("zoo.data.build.build_tokenizer", no_training)
    monkeypatch.setattr("zoo.data.sources.base.encode_documents", no_training)
    tok2, dm = build_data(SMALL_STDLIB, SMALL_BPE, task="mlm", cache_dir=cache_dir, **KW)  # lm/mlm share ids
    assert tok2.encode("def f(x): pass") == tok1.encode("def f(x): pass")
    assert {p.name: p.stat().st_mtime_ns for p in entry.rglob("*")} == mtimes
    assert entries(cache_dir) == [entry]
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".tmp")]


def test_key_changes_with_tokenizer_and_data(cache_dir):
    build_data(SMALL_STDLIB, SMALL_BPE, task="lm", cache_dir=cache_dir, **KW)
    build_data(SMALL_STDLIB, {**SMALL_BPE, "vocab_size": 330}, task="lm", cache_dir=cache_dir, **KW)
    build_data({**SMALL_STDLIB, "max_bytes": 30_000}, SMALL_BPE, task="lm", cache_dir=cache_dir, **KW)
    assert len(entries(cache_dir)) == 3


def test_open_data_takes_what_the_task_decides_as_plain_arguments(cache_dir):
    """The data layer knows no task: zoo.tasks.build_data hands it a task's corpus kind, tokenizer check and
    datamodule; another kind of data is a CorpusKindError carrying the kind it gives."""
    from zoo.data.build import CorpusKindError, open_data

    checked = []
    plain = dict(check_tokenizer=checked.append,
                 datamodule=lambda entry, loader, **common: (entry, loader, common),
                 cache_dir=cache_dir, **KW)
    tok, (entry, loader, common) = open_data(SMALL_TOY, SMALL_BPE, corpus_kind="pairs", **plain)
    # before encoding, and the entry's
    assert entry.tokenizer is tok and len(checked) == 2 and checked[-1] is tok
    assert ((common["batch_size"], common["max_seq_len"], common["seed"]) == (4, 16, 0)
            and "mask_prob" in loader)
    with pytest.raises(CorpusKindError, match=r"^data=translation_toy gives pairs examples$") as e:
        open_data(SMALL_TOY, SMALL_BPE, corpus_kind="text", **plain)
    assert e.value.kind == "pairs"


def test_failed_build_leaves_no_cache_entry(cache_dir, monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr("zoo.data.sources.base.encode_documents", crash)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        build_data(SMALL_TOY, SMALL_BPE, task="seq2seq", cache_dir=cache_dir, **KW)
    assert list(cache_dir.iterdir()) == []


def test_manifest_and_compact_ids(cache_dir):
    build_data(SMALL_STDLIB, SMALL_BPE, task="lm", cache_dir=cache_dir, **KW)
    (entry,) = entries(cache_dir)
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["dtype"] == "uint16" and manifest["tokenizer"] == SMALL_BPE
    n_ids = (entry / "train.tokens.ids.bin").stat().st_size // 2
    assert n_ids > 10_000
    assert load_tokenizer(entry / "tokenizer").vocab_size == 320


def test_accepts_omegaconf_and_reports_missing(cache_dir, tmp_path):
    with pytest.raises(ValueError, match=r"data.files is required"):
        build_data(
            OmegaConf.create({"name": "text", "files": "???"}),
            SMALL_BPE,
            task="lm",
            cache_dir=cache_dir,
            **KW,
        )
    (tmp_path / "a.txt").write_text("hello zoo\n" * 200)
    tok, dm = build_data(
        OmegaConf.create({"name": "text", "files": str(tmp_path / "*.txt")}),
        OmegaConf.create({"name": "char"}),
        task="lm",
        cache_dir=cache_dir,
        **KW,
    )
    assert tok.kind == "char" and tok.vocab_size == 5 + len(set("hello zoo\n"))


@pytest.mark.parametrize(
    ("data", "tok", "task", "error", "match"),
    [
        (SMALL_STDLIB, SMALL_BPE, "translate", ValueError, r"task='translate' is unknown; known: \["),
        (
            SMALL_STDLIB,
            SMALL_BPE,
            "seq2seq",
            ValueError,
            r"data=stdlib_text gives text examples, .*\['lm', 'mlm'\]",
        ),
        (SMALL_TOY, SMALL_BPE, "lm", ValueError, r"suit task \['seq2seq'\]"),
        (SMALL_STDLIB, {"name": "bpe", "vocab_size": 200}, "lm", ValueError, "vocab_size=200 is smaller"),
        (
            {"name": "text", "files": "/nonexistent/*.txt"},
            SMALL_BPE,
            "lm",
            FileNotFoundError,
            "matched no files",
        ),
        (
            {"name": "text", "files": "/nonexistent/x.txt"},
            SMALL_BPE,
            "lm",
            FileNotFoundError,
            "/nonexistent/x.txt",
        ),
        (
            SMALL_STDLIB,
            {"name": "file", "path": "/nonexistent/tok.json"},
            "lm",
            FileNotFoundError,
            "tok.json",
        ),
    ],
)
def test_bad_input_fails_before_training(cache_dir, monkeypatch, data, tok, task, error, match):
    def no_training(*args, **kwargs):
        raise AssertionError("trained despite bad input")

    monkeypatch.setattr("zoo.data.build.build_tokenizer", no_training)
    with pytest.raises(error, match=match):
        build_data(data, tok, task=task, cache_dir=cache_dir, **KW)
    assert not cache_dir.exists() or entries(cache_dir) == []


def test_bad_user_files_fail_before_training(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("zoo.data.build.build_tokenizer", lambda *a, **k: pytest.fail("trained"))
    (tmp_path / "ok.txt").write_text("fine text\n")
    (tmp_path / "bad.txt").write_bytes(b"abc\xff")
    with pytest.raises(ValueError, match=r"bad.txt: not valid UTF-8 at byte offset 3"):
        build_data(
            {"name": "text", "files": str(tmp_path / "*.txt")},
            SMALL_BPE,
            task="lm",
            cache_dir=cache_dir,
            **KW,
        )
    (tmp_path / "p.tsv").write_text("a\tb\nc d\n")
    with pytest.raises(ValueError, match=r"p.tsv:2: expected 'src<TAB>tgt'"):
        build_data(
            {"name": "pairs", "path": str(tmp_path / "p.tsv")},
            SMALL_BPE,
            task="seq2seq",
            cache_dir=cache_dir,
            **KW,
        )
    (tmp_path / "e.txt").write_text("   \n")
    with pytest.raises(ValueError, match="empty or whitespace-only"):
        build_data(
            {"name": "text", "files": str(tmp_path / "e.txt")},
            SMALL_BPE,
            task="lm",
            cache_dir=cache_dir,
            **KW,
        )


def test_model_overrides(cache_dir, tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text(
        "".join(json.dumps({"text": f"text {i}", "label": ["neg", "pos"][i % 2]}) + "\n" for i in range(20))
    )
    tok, dm = build_data(
        {"name": "classification", "path": str(path)},
        SMALL_BPE,
        task="classification",
        cache_dir=cache_dir,
        **KW,
    )
    assert model_overrides(tok) == {
        "vocab_size": tok.vocab_size,
        "pad_id": 0,
        "bos_id": 1,
        "eos_id": 2,
    }  # the labels are the task's to set (model.head.num_labels)
    tok.save(tmp_path / "run" / "tokenizer")
    assert load_tokenizer(tmp_path / "run" / "tokenizer").label_names == ["neg", "pos"] == dm.label_names


def test_default_cache_dir_env(monkeypatch, tmp_path):
    from zoo.data.build import default_cache_dir

    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    assert os.fspath(default_cache_dir())


def test_labels_do_not_leak_through_a_tokenizer_file(cache_dir, tmp_path):
    """A tokenizer saved by a classification run, reused for LM data, brings no label names along."""
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps({"text": f"text {i}", "label": "ab"[i % 2]}) + "\n"
                            for i in range(20)))
    tok, _ = build_data({"name": "classification", "path": str(path)}, SMALL_BPE, task="classification",
                        cache_dir=cache_dir, **KW)
    tok.save(tmp_path / "tok")
    assert load_tokenizer(tmp_path / "tok").label_names == ["a", "b"]
    lm_tok, _ = build_data(SMALL_STDLIB, {"name": "file", "path": str(tmp_path / "tok")}, task="lm",
                           cache_dir=cache_dir, **KW)
    assert lm_tok.label_names is None
    assert "num_labels" not in model_overrides(lm_tok)


def test_a_tokenizer_read_from_files_is_keyed_by_their_content_not_their_folder(cache_dir, tmp_path):
    """evaluate.py saves the checkpoint's tokenizer to a new temporary folder on every run: the same tokenizer
    in another folder reuses the entry (it used to be keyed by the folder's path, so evaluations never hit the
    cache); a changed tokenizer.json, zoo_tokenizer.json or tokenizer_config.json never does; labels.json,
    which the data's labels replace, does not count."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the zebra runs under a blue river\n" * 200, encoding="utf-8")
    data = {"name": "text", "files": str(corpus)}

    def build(name: str, path) -> list:
        build_data(data, {"name": name, "path": str(path)}, task="lm", cache_dir=cache_dir, **KW)
        return entries(cache_dir)

    char = build_tokenizer({"name": "char"}, ["the zebra runs under a blue river\n"])
    first = build("file", char.save(tmp_path / "a"))
    moved = shutil.copytree(tmp_path / "a", tmp_path / "scratch" / "tokenizer")
    (moved / "labels.json").write_text('["x", "y"]', encoding="utf-8")
    assert build("file", moved) == first  # the same tokenizer elsewhere: the same entry
    build_tokenizer({"name": "char"}, ["the zebra runs under a blue river!\n"]).save(tmp_path / "other")
    assert len(build("file", tmp_path / "other")) == 2  # another vocabulary
    meta = shutil.copytree(tmp_path / "a", tmp_path / "meta")
    (meta / "zoo_tokenizer.json").write_text(json.dumps({"kind": "char", "clean_up_spaces": True}),
                                             encoding="utf-8")
    assert len(build("file", meta)) == 3  # the same tokenizer.json read with other metadata
    for name in ("x.json", "y.json"):  # bare files: their bytes, not their names
        (tmp_path / name).write_bytes((tmp_path / "a" / "tokenizer.json").read_bytes())
    assert len(build("file", tmp_path / "x.json")) == len(build("file", tmp_path / "y.json")) == 4

    char.save_hf(tmp_path / "hf1")
    assert len(build("hf", tmp_path / "hf1")) == 5
    copy = shutil.copytree(tmp_path / "hf1", tmp_path / "hf2")
    assert len(build("hf", copy)) == 5
    config = json.loads((copy / "tokenizer_config.json").read_text(encoding="utf-8"))
    (copy / "tokenizer_config.json").write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}),
                                                encoding="utf-8")
    assert len(build("hf", copy)) == 6
