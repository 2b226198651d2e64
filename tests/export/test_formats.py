"""Every registered export format (zoo.export.FORMATS): exports a checkpoint, re-exports over its own
earlier export, and refuses a folder it did not write (another format's export, a user's files) untouched.
The checkpoint is one every format can write: a Llama-shaped model with a byte-level BPE (gguf carries no
character tokenizer)."""

from __future__ import annotations

import pytest

import zoo
from tests.test_checkpoint_export import files
from zoo.checkpoint import CheckpointError, atomic_torch_save, zoo_section
from zoo.export.registry import FORMATS
from zoo.tokenizers.trained import train_bpe


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    tokenizer = train_bpe(["hello export, every format"], vocab_size=270, min_frequency=1)
    model = zoo.build("llama_small", vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                      n_kv_heads=1, d_ff=32, max_seq_len=16)
    path = tmp_path_factory.mktemp("ckpt") / "model.ckpt"
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    atomic_torch_save({"state_dict": state, "zoo": zoo_section(model.config, "lm", tokenizer)}, path)
    return path


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_format_replaces_only_its_own_exports(tmp_path, ckpt, name):
    kind = FORMATS[name]
    out = zoo.export(ckpt, tmp_path / "out", format=name)
    assert kind.wrote(out) and {p.name for p in out.iterdir()} <= set(kind.files)
    assert zoo.export(ckpt, out, format=name) == out and kind.wrote(out)  # over its own earlier export
    for other in FORMATS:
        if other != name:
            theirs = zoo.export(ckpt, tmp_path / other, format=other)
            before = files(theirs)
            refused = f"exists and is not a {kind.label}; zoo replaces only what it wrote itself"
            with pytest.raises(CheckpointError, match=refused):
                zoo.export(ckpt, theirs, format=name)
            assert files(theirs) == before
    (out / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="holds files zoo did not write: notes.txt"):
        zoo.export(ckpt, out, format=name)
    assert (out / "notes.txt").read_text() == "mine"
