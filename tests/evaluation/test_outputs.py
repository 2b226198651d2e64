"""evaluate.py writes only what it says it writes (the metrics JSON, and the data cache under cache_dir): an
output pointed into a zoo export folder or a folder holding the user's own `tokenizer/` leaves every byte
there as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zoo
from zoo.apps import ConfigError
from zoo.evaluation.run import evaluate
from zoo.tokenizers import build_tokenizer

from .conftest import write_checkpoint

TEXT = "".join(f"row {i} of some text\n" for i in range(150))


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def lm_checkpoint(tmp_path) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    tok = build_tokenizer({"name": "char"}, [TEXT])
    model = zoo.build("gpt_nano", vocab_size=tok.vocab_size, max_seq_len=16)
    return write_checkpoint(tmp_path / "lm.ckpt", model, "lm", tok), corpus


def other_export(tmp_path: Path) -> Path:
    """A zoo export of another model whose tokenizer differs from the evaluated checkpoint's."""
    tok = build_tokenizer({"name": "char"}, ["only a few letters: xyz\n"])
    model = zoo.build("gpt_nano", vocab_size=tok.vocab_size, max_seq_len=16)
    return zoo.export(write_checkpoint(tmp_path / "other.ckpt", model, "lm", tok), tmp_path / "export")


def users_folder(tmp_path: Path) -> Path:
    """A folder of the user's with a `tokenizer/` of their own (not a zoo tokenizer at all)."""
    folder = tmp_path / "mine"
    (folder / "tokenizer").mkdir(parents=True)
    (folder / "tokenizer" / "tokenizer.json").write_text('{"mine": true}\n')
    (folder / "tokenizer" / "notes.txt").write_text("hand-made vocabulary\n")
    return folder


@pytest.mark.parametrize("make_folder", [other_export, users_folder], ids=["zoo_export", "users_tokenizer"])
def test_output_inside_a_folder_with_a_tokenizer_leaves_it_untouched(lm_checkpoint, make_eval_cfg, tmp_path,
                                                                     make_folder):
    ckpt, corpus = lm_checkpoint
    folder = make_folder(tmp_path)
    before = tree(folder)
    assert any(name.startswith("tokenizer/") for name in before)
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}",
                                     f"output={folder / 'metrics.json'}"]))
    after = tree(folder)
    assert after.pop("metrics.json") and after == before  # the metrics file added, every other byte as it was
    assert json.loads((folder / "metrics.json").read_text())["metrics"]["tokens"] == report.metrics["tokens"]


def test_default_output_writes_only_the_metrics(lm_checkpoint, make_eval_cfg, tmp_path):
    ckpt, corpus = lm_checkpoint
    evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}"]))
    assert list(tree(tmp_path / "eval")) == ["metrics.json"]  # paths.output_dir: no tokenizer/ beside it


def test_a_second_evaluation_reuses_the_data_cache(lm_checkpoint, make_eval_cfg, monkeypatch):
    """The checkpoint's tokenizer is saved to a new temporary folder on each run; the data cache is keyed by
    the tokenizer's files' content, not that folder, so the second run of the same evaluation encodes nothing
    (it used to build a new entry every run)."""
    ckpt, corpus = lm_checkpoint
    cfg = [f"ckpt={ckpt}", "data=text", f"data.files={corpus}"]
    first = evaluate(make_eval_cfg(cfg))

    def no_new_entry(*args, **kwargs):
        raise AssertionError("the second evaluation built a new cache entry")

    monkeypatch.setattr("zoo.data.build.CacheEntry.publish", no_new_entry)
    assert evaluate(make_eval_cfg(cfg)).metrics == first.metrics


@pytest.mark.parametrize("content", ['my notes\n', '{"metrics": {"mine": 1}}\n'], ids=["text", "other json"])
def test_output_onto_a_users_file_is_refused_before_the_checkpoint_is_read(lm_checkpoint, make_eval_cfg,
                                                                           tmp_path, monkeypatch, content):
    """output= naming a file zoo did not write (zoo.outputs): one ConfigError naming output=, the file as it
    was, and nothing opened (it used to be replaced by the report)."""
    ckpt, corpus = lm_checkpoint
    notes = tmp_path / "notes.json"
    notes.write_text(content)

    def opened(*args, **kwargs):
        raise AssertionError("the checkpoint was opened before output= was checked")

    monkeypatch.setattr("zoo.evaluation.run.open_trained", opened)
    with pytest.raises(ConfigError) as err:
        evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}", f"output={notes}"]))
    assert str(err.value) == (f"output={notes} exists and is not an evaluate.py report; zoo replaces only "
                              "what it wrote itself, so choose a new path or remove it first.")
    assert notes.read_text() == content
    folder = rf"output={tmp_path} is a folder, not a file \(an evaluate.py report is one file\)"
    with pytest.raises(ConfigError, match=folder + r"; name a new file, e.g. output=.*metrics.json"):
        evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}", f"output={tmp_path}"]))


def test_output_onto_its_own_earlier_report_is_replaced(lm_checkpoint, make_eval_cfg, tmp_path):
    ckpt, corpus = lm_checkpoint
    out = tmp_path / "metrics.json"
    cfg = [f"ckpt={ckpt}", "data=text", f"data.files={corpus}", f"output={out}"]
    evaluate(make_eval_cfg(cfg))
    out.write_text(out.read_text().replace('"split": "val"', '"split": "earlier"'))
    evaluate(make_eval_cfg([*cfg, "max_examples=2"]))
    assert json.loads(out.read_text())["split"] == "val"
