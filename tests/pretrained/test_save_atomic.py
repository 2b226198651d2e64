"""save_pretrained into a folder that already holds a checkpoint: stale weight files go, the user's files
stay, and a save stopped at any step (exception or kill) leaves the old model or the new one, never a mix."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel

import zoo
from tests.crash import STEPS, Killed, hidden, stop_at
from zoo.atomic import _umask

USER_FILES = {"tokenizer.json": '{"model": "mine"}', "README.md": "my model card"}


def tiny(seed: int, norm_eps: float = 1e-5):
    """A zoo GPT-2 (exportable as gpt2) with seeded weights; `norm_eps` changes config.json, not shapes."""
    torch.manual_seed(seed)
    return zoo.build("gpt2", vocab_size=64, d_model=32, n_layers=1, n_heads=4, max_seq_len=32, dropout=0.0,
                     pad_id=0, bos_id=1, eos_id=2, norm_eps=norm_eps).eval()


def reloaded(model, folder):
    """`model` as from_pretrained returns it (derived config fields such as d_ff filled in)."""
    return zoo.from_pretrained(zoo.save_pretrained(model, folder))


def same(a, b) -> bool:
    """Same config and bit-identical weights."""
    sa, sb = a.state_dict(), b.state_dict()
    return a.config == b.config and sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def hf_weights(folder) -> dict[str, torch.Tensor]:
    return GPT2LMHeadModel.from_pretrained(folder).state_dict()


def old_folder(tmp_path, layout: str):
    """A folder holding model `tiny(0)` as zoo writes it ("zoo") or as transformers writes it sharded
    ("sharded") or as a pickle ("bin"), plus files of the user's own."""
    folder = tmp_path / "old"
    zoo.save_pretrained(tiny(0), folder)
    if layout == "sharded":
        hf = GPT2LMHeadModel.from_pretrained(folder)
        shutil.rmtree(folder)
        hf.save_pretrained(folder, max_shard_size="30KB")
    if layout == "bin":  # transformers 5 writes safetensors only; older ones wrote this
        torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    for name, text in USER_FILES.items():
        (folder / name).write_text(text)
    return folder


def weight_files(folder) -> set[str]:
    return {p.name for p in folder.iterdir()
            if p.suffix in (".safetensors", ".bin") or p.name.endswith("index.json")}


@pytest.mark.parametrize("layout", ["sharded", "bin"])
def test_save_over_an_hf_checkpoint_replaces_its_weights_and_keeps_other_files(tmp_path, layout):
    folder = old_folder(tmp_path, layout)
    assert weight_files(folder) != {"model.safetensors"}  # shards + index, or pytorch_model.bin
    new = tiny(1, norm_eps=1e-6)
    zoo.save_pretrained(new, folder)
    assert weight_files(folder) == {"model.safetensors"}  # stale index, shards and pickle are gone
    assert same(zoo.from_pretrained(folder), reloaded(new, tmp_path / "reference"))
    expected = hf_weights(tmp_path / "reference")
    got = hf_weights(folder)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert {n: (folder / n).read_text() for n in USER_FILES} == USER_FILES
    assert not hidden(folder)


def test_an_index_never_deletes_files_outside_the_folder_or_of_other_kinds(tmp_path):
    folder = old_folder(tmp_path, "sharded")
    (tmp_path / "victim.safetensors").write_text("keep")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"].update({first: "../victim.safetensors", "x": "README.md"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    zoo.save_pretrained(tiny(1), folder)
    assert (tmp_path / "victim.safetensors").read_text() == "keep"
    assert (folder / "README.md").read_text() == USER_FILES["README.md"]


def test_a_folder_an_older_zoo_left_mixed_loads_what_transformers_loads(tmp_path):
    """Older zoo saved model.safetensors beside an older sharded checkpoint and left the index; transformers
    reads model.safetensors first, and so must zoo."""
    folder = old_folder(tmp_path, "sharded")
    newer = tmp_path / "newer"
    zoo.save_pretrained(tiny(1), newer)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(newer / name, folder / name)
    assert (folder / "model.safetensors.index.json").exists()
    assert same(zoo.from_pretrained(folder), zoo.from_pretrained(newer))


def test_config_and_weights_of_different_saves_are_refused(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    zoo.save_pretrained(tiny(0), first)
    zoo.save_pretrained(tiny(1, norm_eps=1e-6), second)
    shutil.copy(first / "config.json", second / "config.json")
    with pytest.raises(ValueError,
                       match=r"config.json \(zoo_save_id .*\) and model.safetensors \(zoo_save_id .*\) "
                             r"were written by different saves"):
        zoo.from_pretrained(second)


def test_saved_files_get_the_umask_permissions(tmp_path):
    folder = zoo.save_pretrained(tiny(0), tmp_path / "out")
    for name in ("config.json", "model.safetensors"):
        assert os.stat(folder / name).st_mode & 0o777 == 0o666 & ~_umask(), name


@pytest.mark.parametrize("layout", ["zoo", "sharded", "bin"])
def test_a_save_stopped_at_any_step_leaves_the_old_or_the_new_model(tmp_path, layout):
    pristine = old_folder(tmp_path, layout)
    old, new = zoo.from_pretrained(pristine), reloaded(tiny(1, norm_eps=1e-6), tmp_path / "reference")
    old_hf, new_hf = hf_weights(pristine), hf_weights(tmp_path / "reference")
    root = tmp_path / "root"
    shutil.copytree(pristine, root / "model")
    with stop_at(None, root, tmp_path / "unused", STEPS) as steps:
        zoo.save_pretrained(new, root / "model")
    assert len(steps) >= 2, steps
    for k in range(len(steps)):
        shutil.rmtree(root)
        shutil.copytree(pristine, root / "model")
        image = tmp_path / f"killed-{k}"
        with pytest.raises(Killed), stop_at(k, root, image, STEPS):
            zoo.save_pretrained(new, root / "model")
        for folder, how in ((root / "model", "exception"), (image / "model", "kill")):
            loaded = zoo.from_pretrained(folder)
            assert same(loaded, old) or same(loaded, new), f"{how} at step {k} ({steps[k]}): a mixed model"
            got = hf_weights(folder)  # transformers reads the same weights (config.json may lag one rename)
            assert any(all(torch.equal(got[n], ref[n]) for n in ref) for ref in (old_hf, new_hf)), (how, k)
            zoo.save_pretrained(new, folder)  # the next save recovers and cleans up
            assert same(zoo.from_pretrained(folder), new)
            assert (weight_files(folder) == {"model.safetensors"}
                    and not hidden(folder)), (how, k, os.listdir(folder))
            assert {n: (folder / n).read_text() for n in USER_FILES} == USER_FILES
        shutil.rmtree(image)


def test_a_kill_between_the_two_renames_still_loads_the_new_model(tmp_path):
    """The weights are renamed in first; until config.json follows, zoo reads the save's pending config."""
    folder = old_folder(tmp_path, "zoo")
    new = reloaded(tiny(1, norm_eps=1e-6), tmp_path / "reference")
    image = tmp_path / "image"
    with pytest.raises(Killed), stop_at(1, tmp_path / "old", image, [(os, "replace")]):
        zoo.save_pretrained(new, folder)
    with safe_open(str(image / "model.safetensors"), framework="pt") as f:
        save_id = f.metadata()["zoo_save_id"]
    assert json.loads((image / "config.json").read_text())["zoo_save_id"] != save_id  # config.json still old
    assert same(zoo.from_pretrained(image), new)


@pytest.mark.parametrize(("name", "text"), [("config.json", '{"learning_rate": 0.1}\n'),
                                            ("config.json", "my notes\n"),
                                            ("model.safetensors", "not weights\n")])
def test_save_into_a_folder_whose_config_or_weights_are_the_users_is_refused(tmp_path, name, text):
    """zoo.outputs: a save replaces config.json and the weights, so a folder where those are not a model
    checkpoint's (a project's own config.json) is refused naming it, every file as it was (they were
    replaced)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / name).write_text(text)
    (folder / "README.md").write_text("mine")
    with pytest.raises(ValueError) as err:
        zoo.save_pretrained(tiny(0), folder)
    assert str(err.value) == (
        f"path={folder} exists and is not a model checkpoint folder; zoo replaces only a checkpoint's "
        "config.json, weights and indexes (other files stay), so choose a new path or remove it first.")
    assert {p.name: p.read_text() for p in folder.iterdir()} == {name: text, "README.md": "mine"}
    with pytest.raises(ValueError, match=rf"^path={folder / 'README.md'} is a file, not a folder"):
        zoo.save_pretrained(tiny(0), folder / "README.md")


def test_save_into_a_folder_of_other_files_only_adds_the_checkpoint(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("mine")
    assert same(reloaded(tiny(0), folder), reloaded(tiny(0), tmp_path / "reference"))
    assert (folder / "README.md").read_text() == "mine"
