"""zoo/outputs.py: the one rule for outputs a user names. A new path, an empty folder (for a folder) or what
zoo wrote itself is let through; anything else is one OutputError naming the key and the path, and nothing
on disk changes."""

from __future__ import annotations

import os

import pytest

from zoo.outputs import Output, OutputError

MARK = "written by zoo"
FILE = Output("out", "a zoo file", folder=False, ours=lambda p: p.read_text() == MARK, example="x.bin")
FOLDER = Output("dir", "a zoo folder", folder=True, ours=lambda p: (p / "mark").is_file())


def test_new_paths_empty_folders_and_zoos_own_outputs_pass(tmp_path):
    (tmp_path / "ours.bin").write_text(MARK)
    (tmp_path / "empty").mkdir()
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "mark").write_text("")
    assert FILE.check(tmp_path / "new" / "deeper" / "x.bin") == tmp_path / "new" / "deeper" / "x.bin"
    assert FILE.check(tmp_path / "ours.bin") == tmp_path / "ours.bin"
    assert FOLDER.check(tmp_path / "empty") == tmp_path / "empty"
    assert FOLDER.check(tmp_path / "export") == tmp_path / "export"
    assert not (tmp_path / "new").exists()  # checking writes nothing


@pytest.mark.parametrize(("output", "name", "message"), [
    (FILE, "notes.txt", "out={p} exists and is not a zoo file; zoo replaces only what it wrote itself, so "
                        "choose a new path or remove it first."),
    (FILE, "folder", "out={p} is a folder, not a file (a zoo file is one file); name a new file, e.g. "
                     "out={p}/x.bin."),
    (FOLDER, "notes.txt", "dir={p} is a file, not a folder (a zoo folder is a folder); choose a new path or "
                          "remove it first."),
    (FOLDER, "folder", "dir={p} exists and is not a zoo folder; zoo replaces only what it wrote itself, so "
                       "choose a new path or remove it first."),
    (FILE, "notes.txt/x.bin", "out={p} cannot be written: {t}/notes.txt is a file, not a folder; choose a "
                              "new path or remove it first."),
    (FOLDER, "notes.txt/a/b", "dir={p} cannot be written: {t}/notes.txt is a file, not a folder; choose a "
                              "new path or remove it first."),
])
def test_anything_else_is_one_error_naming_key_and_path(tmp_path, output, name, message):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("mine too")
    with pytest.raises(OutputError) as err:
        output.check(tmp_path / name)
    assert str(err.value) == message.format(p=tmp_path / name, t=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["folder", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "folder" / "notes.txt").read_text() == "mine too"
