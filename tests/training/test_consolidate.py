"""`python -m zoo.training.consolidate ckpt=<sharded> out=<file>` writes a new file or replaces a file it
wrote itself; a user's file, a training checkpoint, a folder or a place that cannot be written is one
`error:` line naming `out=` before any shard is read, and the file is left as it was (zoo.outputs)."""

from __future__ import annotations

import os

import pytest
import torch

import zoo
from zoo.checkpoint import SHARDED_META, atomic_torch_save, zoo_section
from zoo.presets import build
from zoo.tokenizers import TOKENIZERS
from zoo.training.consolidate import main


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """A sharded checkpoint folder as trainer=fsdp writes it (torch.distributed.checkpoint shards + meta.pt)
    of a tiny decoder, written by this one process."""
    import torch.distributed.checkpoint as dcp

    tok = TOKENIZERS["char"](["the cat sat", "a dog ran"])
    model = build(dict(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32))
    folder = tmp_path_factory.mktemp("run") / "last.ckpt"
    state = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
    dcp.save({"state_dict": state}, checkpoint_id=folder, no_dist=True)
    atomic_torch_save({"zoo": zoo_section(model.config, "lm", tok), "epoch": 0}, folder / SHARDED_META)
    return folder


def test_a_new_path_and_zoos_own_earlier_file_are_written(sharded, tmp_path, capsys):
    out = tmp_path / "model.ckpt"
    assert main([f"ckpt={sharded}", f"out={out}"]) == 0
    assert main([f"ckpt={sharded}", f"out={out}"]) == 0  # re-running onto its own output
    zoo.load(out)
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt"]
    assert capsys.readouterr().out.count("wrote") == 2


@pytest.mark.parametrize("content", ["text", "other torch file", "training checkpoint"])
def test_a_users_file_is_refused_by_name_and_kept(sharded, tmp_path, capsys, content):
    """Not only a user's file: a training checkpoint (its optimizer and loop state would be lost) too."""
    out = tmp_path / "notes.ckpt"
    if content == "text":
        out.write_bytes(b"my notes\n")
    elif content == "other torch file":
        torch.save({"state_dict": {}}, out)  # a PyTorch file, but no zoo section
    else:
        main([f"ckpt={sharded}", f"out={out}"])
        training = torch.load(out, weights_only=True)
        torch.save({**training, "optimizer_states": [{"state": {}}], "global_step": 7}, out)
        capsys.readouterr()
    before = out.read_bytes()
    assert main([f"ckpt={sharded}", f"out={out}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: out={out} exists and is not a consolidated zoo checkpoint; zoo replaces")
    assert "choose a new path or remove it first" in err
    assert out.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["notes.ckpt"]


def test_a_folder_or_a_path_under_a_file_is_one_clear_error(sharded, tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    assert main([f"ckpt={sharded}", f"out={tmp_path / 'folder'}"]) == 1
    err = capsys.readouterr().err
    assert err == (f"error: out={tmp_path / 'folder'} is a folder, not a file (a consolidated zoo checkpoint "
                   f"is one file); name a new file, e.g. out={tmp_path / 'folder' / 'model.ckpt'}.\n")
    assert main([f"ckpt={sharded}", f"out={tmp_path / 'file' / 'model.ckpt'}"]) == 1
    err = capsys.readouterr().err
    under = tmp_path / "file"
    assert err.startswith(f"error: out={under / 'model.ckpt'} cannot be written: {under} is a file, not a")
    assert ".tmp" not in err
    assert sorted(os.listdir(tmp_path)) == ["file", "folder"] and not os.listdir(tmp_path / "folder")


def test_the_task_state_survives_consolidation_and_is_read_from_the_folder(sharded, tmp_path):
    """A task=dpo run's `task_state` (its dpo.* settings, which evaluate.py scores with, and the precomputed
    reference log-probs) is in the folder's meta.pt; open_trained reads it from the folder, and the
    consolidated file keeps it. Was: consolidate wrote the weights and zoo section alone, and open_trained
    read a folder as an export (no state), so evaluate.py refused both for lacking the dpo.* settings."""
    from zoo.apps import open_trained

    meta = torch.load(sharded / SHARDED_META, weights_only=True)
    state = {"dpo": {"loss_type": "sigmoid", "beta": 0.1, "label_smoothing": 0.0, "sft_weight": 0.0,
                     "reference": "precomputed"},
             "reference_logps": {"train": torch.tensor([[-3.5, -4.25]]), "val": torch.tensor([[-1.0, -2.0]])}}
    folder = tmp_path / "dpo.ckpt"
    folder.mkdir()
    for shard in sharded.iterdir():
        (folder / shard.name).write_bytes(shard.read_bytes())
    atomic_torch_save({**meta, "task_state": state}, folder / SHARDED_META)
    out = tmp_path / "model.ckpt"
    assert main([f"ckpt={folder}", f"out={out}"]) == 0
    assert main([f"ckpt={folder}", f"out={out}"]) == 0  # still its own output: replaced, not refused
    for path in (folder, out):
        kept = open_trained(path)[3]
        assert kept["dpo"] == state["dpo"], path
        for split, logps in state["reference_logps"].items():
            assert torch.equal(kept["reference_logps"][split], logps), (path, split)
