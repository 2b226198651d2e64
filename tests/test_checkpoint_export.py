"""zoo.export into an existing folder: files zoo did not write are never deleted, and a re-export that fails
or is killed at any step leaves the complete old export or the complete new one, with no leftovers after
the next export."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

import zoo
import zoo.atomic
from tests.crash import STEPS, Killed, hidden, state, stop_at
from zoo.atomic import _umask
from zoo.checkpoint import CheckpointError, atomic_torch_save, zoo_section
from zoo.tokenizers.trained import train_char

EXPORT_STEPS = [*STEPS, (zoo.atomic, "exchange")]


def checkpoint(path, seed: int):
    """A tiny zoo training checkpoint at `path` (model seeded by `seed`, char tokenizer)."""
    tokenizer = train_char(["hello export"])
    torch.manual_seed(seed)
    model = zoo.build("gpt2", vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                      max_seq_len=16)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    atomic_torch_save({"state_dict": state, "zoo": zoo_section(model.config, "lm", tokenizer)}, path)
    return path


@pytest.fixture
def ckpts(tmp_path):
    """The old and the new checkpoint; `which` tells their exports apart."""
    old, new = checkpoint(tmp_path / "old.ckpt", 0), checkpoint(tmp_path / "new.ckpt", 1)
    for name, ckpt in (("old", old), ("new", new)):
        EXPORTS[name] = files(zoo.export(ckpt, tmp_path / "reference" / name))
    yield old, new
    EXPORTS.clear()


EXPORTS: dict[str, dict[str, bytes]] = {}  # "old" / "new" -> the files of a fresh export of that checkpoint


def files(folder) -> dict[str, bytes]:
    """{relative path: bytes} of every file under `folder`."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def which(folder) -> str:
    """"old" or "new": the export `folder` holds, complete and byte for byte, and zoo.load opens it."""
    found = [name for name, expected in EXPORTS.items() if files(folder) == expected]
    assert found, f"{folder} holds neither the complete old export nor the new one: {sorted(files(folder))}"
    zoo.load(folder)
    return found[0]


def test_user_files_in_an_export_folder_are_kept_and_the_export_refused(tmp_path, ckpts):
    old, new = ckpts
    out = zoo.export(old, tmp_path / "export")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError,
                       match=r"holds files zoo did not write: notes.txt; .*allowed: model.safetensors"):
        zoo.export(new, out)
    assert files(out) == {**EXPORTS["old"], "notes.txt": b"mine"}


def test_exporting_a_checkpoint_that_lives_in_the_export_folder_is_refused(tmp_path, ckpts):
    old, new = ckpts
    out = zoo.export(old, tmp_path / "export")
    inside = shutil.copy(new, out / "tokenizer" / "new.ckpt")
    with pytest.raises(CheckpointError, match=r"checkpoint .*new.ckpt is inside the export folder"):
        zoo.export(inside, out)
    assert os.path.exists(inside)


def test_a_file_in_place_of_the_export_folder_is_refused(tmp_path, ckpts):
    (tmp_path / "export").write_text("not a folder")
    with pytest.raises(CheckpointError, match="is a file"):
        zoo.export(ckpts[0], tmp_path / "export")


def test_a_re_export_whose_clean_up_fails_half_way_keeps_a_loadable_export(tmp_path, ckpts, monkeypatch):
    """Like a read-only sub-folder: deleting a folder of the export stops after its first file (for root,
    chmod would not stop it, so the deletion is made to fail)."""
    old, new = ckpts
    out = zoo.export(old, tmp_path / "export")
    real_rmtree, real_unlink = shutil.rmtree, os.unlink

    def rmtree_stuck_after_one_file(path, *args, **kwargs):
        if not os.path.basename(path).lstrip(".").startswith("export"):  # e.g. load's temporary folders
            return real_rmtree(path, *args, **kwargs)
        removed = []

        def unlink(name, *a, **kw):
            if removed:
                raise PermissionError(13, "Permission denied", name)
            removed.append(name)
            return real_unlink(name, *a, **kw)

        with monkeypatch.context() as patch:
            patch.setattr(os, "unlink", unlink)
            return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree_stuck_after_one_file)
    try:
        zoo.export(new, out)
    except PermissionError:
        pass  # the old code raised here, with part of the old export deleted and the new one thrown away
    assert which(out) in ("old", "new")
    monkeypatch.undo()
    zoo.export(new, out)  # the next export removes what could not be deleted
    assert which(out) == "new" and not hidden(tmp_path)


def test_staging_leftovers_are_removed_but_look_alike_user_folders_kept(tmp_path, ckpts):
    old, new = ckpts
    out = zoo.export(old, tmp_path / "export")
    leftover = tmp_path / ".export.k3x_9q2a"  # the staging name older zoo versions left behind after a kill
    (leftover / "tokenizer").mkdir(parents=True)
    (leftover / "model.safetensors").write_bytes(b"partial")
    mine = tmp_path / ".export.backup12"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    zoo.export(new, out)
    assert not leftover.exists() and (mine / "notes.txt").read_text() == "mine"


def test_export_permissions_follow_the_umask(tmp_path, ckpts):
    out = zoo.export(ckpts[0], tmp_path / "export")
    assert os.stat(out).st_mode & 0o777 == 0o777 & ~_umask()
    assert os.stat(out / "model.safetensors").st_mode & 0o777 == 0o666 & ~_umask()


def test_a_symlinked_export_folder_stays_a_link(tmp_path, ckpts):
    old, new = ckpts
    real = zoo.export(old, tmp_path / "real")
    (tmp_path / "link").symlink_to(real)
    zoo.export(new, tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and which(real) == "new"


@pytest.mark.parametrize(("first", "atomic_exchange"), [(False, True), (False, False), (True, True)],
                         ids=["re-export-exchange", "re-export-rename-aside", "first-export"])
def test_an_export_stopped_at_any_step_leaves_the_old_or_the_new_export(tmp_path, ckpts, monkeypatch,
                                                                        first, atomic_exchange):
    old, new = ckpts
    if not atomic_exchange:
        monkeypatch.setattr(zoo.atomic, "exchange", lambda a, b: False)
    root = tmp_path / "root"
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    if not first:
        zoo.export(old, pristine / "export")
    shutil.copytree(pristine, root)
    with stop_at(None, root, tmp_path / "unused", EXPORT_STEPS) as steps:
        zoo.export(new, root / "export")
    seen = set()
    for k in range(len(steps)):
        shutil.rmtree(root)
        shutil.copytree(pristine, root)
        image = tmp_path / f"killed-{k}"
        with pytest.raises(Killed), stop_at(k, root, image, EXPORT_STEPS):
            zoo.export(new, root / "export")
        for folder, how in ((root, "exception"), (image, "kill")):
            if state(folder) in seen:  # a state checked already (e.g. after an fsync, or cleaned up)
                continue
            seen.add(state(folder))
            target = folder / "export"
            if atomic_exchange or how == "exception":  # never a moment without a complete export
                assert target.exists() or first, f"{how} at step {k} ({steps[k]}): no export"
            if not target.exists():  # killed between renaming the old one aside and the new one in
                zoo.atomic.sweep(folder, "export", shared=False, contents=zoo.checkpoint.EXPORT_FILES)
            if target.exists():
                assert which(target) in ("old", "new"), (how, k)
            elif not first:
                raise AssertionError(f"{how} at step {k} ({steps[k]}): the old export is lost")
            zoo.export(new, target)  # the next export recovers and cleans up
            assert which(target) == "new" and not hidden(folder), (how, k, os.listdir(folder))
        shutil.rmtree(image)


def test_load_puts_back_an_export_a_killed_swap_left_aside(tmp_path, ckpts):
    """Without an atomic exchange (non-Linux), a kill between 'old aside' and 'new in' leaves only
    .<name>.old-*; zoo.load of the folder puts it back instead of failing."""
    old, _ = ckpts
    target = zoo.export(old, tmp_path / "exp")
    os.rename(target, tmp_path / ".exp.old-killed")
    zoo.load(target)
    assert which(target) == "old" and not (tmp_path / ".exp.old-killed").exists()
