"""`python -m zoo.embedding folder= input= output=`: the written array equals sentence-transformers' encode of
the file's lines, row for row; every bad argument is one error naming it, raised before the model is read."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.pretrained.test_embed import LONG, st_encode
from zoo.embedding.cli import main

LINES = ["the cat sat on the mat", "", "a big red dog ran very quickly", LONG]


@pytest.fixture
def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".npy", ".pt"])
def test_cli_writes_one_row_per_line_equal_to_sentence_transformers(shipped, texts_file, tmp_path, suffix,
                                                                    capsys):
    folder = shipped.sentence_transformers("mean", True)
    output = tmp_path / "out" / f"emb{suffix}"
    assert main([f"folder={folder}", f"input={texts_file}", f"output={output}", "batch_size=3"]) == 0
    written = torch.from_numpy(np.load(output)) if suffix == ".npy" else torch.load(output)
    assert written.shape == (len(LINES), 32) and written.dtype == torch.float32
    assert (written - st_encode(folder, LINES)).abs().max() < 1e-5
    assert "4 x 32 float32 (pooling mean, normalize true, max_length 128; 1 text(s) cut at 128 tokens)" in \
        capsys.readouterr().err


def test_cli_arguments_replace_the_folders_settings(shipped, texts_file, tmp_path):
    """pooling=cls normalize=true on the mean folder: sentence-transformers' own modules rearranged so."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    folder, output = shipped.sentence_transformers(), tmp_path / "cls.npy"
    main([f"folder={folder}", f"input={texts_file}", f"output={output}", "pooling=cls", "normalize=true"])
    word = SentenceTransformer(str(folder), device="cpu")[0]
    reference = SentenceTransformer(modules=[word, Pooling(32, "cls"), Normalize()], device="cpu")
    assert (torch.from_numpy(np.load(output))
            - reference.encode(LINES, convert_to_tensor=True)).abs().max() < 1e-5


@pytest.mark.parametrize(("args", "message"), [
    ("input={in_} output={out}.npy", r"folder= is required"),
    ("folder={missing} input={in_} output={out}.npy", r"folder='.*missing' is not a folder"),
    ("folder={st} input={empty} output={out}.npy",
     r"input='.*empty\.txt' holds no text \(2 line\(s\), all empty\)"),
    ("folder={st} input={missing} output={out}.npy", r"input='.*missing' is not a file"),
    ("folder={st} input={in_} output={out}.csv", r"output='.*out\.csv' must end in \.npy or \.pt"),
    ("folder={st} input={in_} output={out}.npy pooling=avg",
     r"pooling: Unknown sentence pooling 'avg'\. Allowed: cls, last, max, mean"),
    ("folder={st} input={in_} output={out}.npy batch_size=0",
     r"batch_size=0 and max_length=None must be >= 1"),
    ("folder={st} inptu={in_}", r"Unknown key 'inptu'\. Did you mean 'input'\?"),
    ("folder={st} input={in_} output={out}.npy batch_size=x",
     r"batch_size='x' is not an integer\."),
    ("folder", r"Arguments are key=value, got 'folder'"),
])
def test_cli_bad_arguments_are_one_error_each(shipped, texts_file, tmp_path, args, message):
    (tmp_path / "empty.txt").write_text("\n  \n")
    argv = args.format(st=shipped.sentence_transformers(), in_=texts_file, empty=tmp_path / "empty.txt",
                       missing=tmp_path / "missing", out=tmp_path / "out").split()
    with pytest.raises(ValueError, match=message):
        main(argv)
    assert not list(tmp_path.glob("out*"))


@pytest.mark.e2e
def test_python_m_zoo_embedding_prints_one_error_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "zoo.embedding", f"folder={tmp_path / 'nope'}",
                           "input=x.txt", "output=e.npy"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: folder='{tmp_path / 'nope'}' is not a folder; give a Hugging Face model folder "
        "(config.json, weights, tokenizer.json), a sentence-transformers one included."]


@pytest.mark.parametrize("mine", ["notes", "labels"])
def test_cli_output_onto_a_users_file_is_refused_before_the_model_is_read(shipped, texts_file, tmp_path,
                                                                        monkeypatch, mine):
    """output= naming a file this command did not write (zoo.outputs; a text file, an int64 array): one error
    naming output=, the file as it was (it used to be replaced by the embeddings)."""
    output = tmp_path / "mine.npy"
    if mine == "notes":
        output.write_text("my notes\n")
    else:
        np.save(output, np.arange(6).reshape(2, 3))
    before = output.read_bytes()

    def read(*args, **kwargs):
        raise AssertionError("the model was read before output= was checked")

    monkeypatch.setattr("zoo.embedding.cli.load_embedder", read)
    refused = rf"^output={output} exists and is not an embeddings file; zoo replaces only what it wrote"
    with pytest.raises(ValueError, match=refused + r" itself, so choose a new path or remove it first\.$"):
        main([f"folder={shipped.sentence_transformers()}", f"input={texts_file}", f"output={output}"])
    assert output.read_bytes() == before


@pytest.mark.parametrize("suffix", [".npy", ".pt"])
def test_cli_output_onto_its_own_earlier_output_is_replaced(shipped, texts_file, tmp_path, suffix):
    output = tmp_path / f"emb{suffix}"
    args = [f"folder={shipped.sentence_transformers()}", f"input={texts_file}", f"output={output}"]
    assert main([*args, "pooling=cls"]) == 0
    first = output.read_bytes()
    assert main(args) == 0 and output.read_bytes() != first
