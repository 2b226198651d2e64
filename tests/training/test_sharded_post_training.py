"""FSDP2 (trainer=fsdp, zoo.training.sharding) for the post-training tasks (issue 38): two gloo CPU processes
of 2 rows each train task=sft and task=dpo (a live frozen reference, or dpo.reference=precomputed: every
pair scored by the sharded model before the first step) as one plain process of 4 does: the same train
losses and final weights (1e-5, as tests/training/test_sharded.py). The sharded checkpoint folder keeps the
DPO task state (its dpo.* settings and the precomputed reference log-probs, equal to the one process's),
and `python -m zoo.training.consolidate` carries it into the single file."""

from __future__ import annotations

import pytest
import torch

from zoo.apps import open_trained
from zoo.checkpoint import read_checkpoint
from zoo.training.consolidate import main as consolidate_main

from .conftest import one_and_two_fsdp
from .test_resume_post_training import RUN, write_chats, write_pairs

pytestmark = pytest.mark.e2e  # spawns two processes per case


@pytest.mark.parametrize("case", ["sft", "dpo-live", "dpo-precomputed"])
def test_two_fsdp_processes_match_one(tmp_path, run_cli, make_cfg, cache_dir, case):
    task, _, reference = case.partition("-")
    data = (["task=sft", "data=chat", f"data.path={write_chats(tmp_path / 'chats.jsonl')}"] if task == "sft"
            else ["task=dpo", "data=preference", f"data.path={write_pairs(tmp_path / 'pairs.jsonl')}",
                  f"dpo.reference={reference}"])
    base = [*RUN, *data, "trainer.max_steps=3", "eval_every=3", "model.dropout=0.0"]  # dropout: per rank
    one, folder = one_and_two_fsdp(tmp_path, run_cli, make_cfg, cache_dir, base, batch_size=4, steps=3)
    expected = read_checkpoint(one / "checkpoints" / "last.ckpt")
    weights = read_checkpoint(folder)["state_dict"]
    assert sorted(weights) == sorted(expected["state_dict"])
    for name, tensor in expected["state_dict"].items():
        torch.testing.assert_close(weights[name], tensor, atol=1e-5, rtol=0, msg=name)
    if task != "dpo":
        return
    out = tmp_path / "one_file.ckpt"
    assert consolidate_main([f"ckpt={folder}", f"out={out}"]) == 0
    for path in (folder, out):  # what evaluate.py reads (zoo.apps.open_trained)
        _, _, saved_task, state = open_trained(path)
        assert saved_task == "dpo" and state["dpo"] == expected["task_state"]["dpo"], path
        assert state["dpo"]["reference"] == reference
        cached, want = state.get("reference_logps"), expected["task_state"].get("reference_logps")
        assert (cached is None) == (want is None) == (reference == "live"), path
        for split in want or {}:
            torch.testing.assert_close(cached[split], want[split], atol=1e-5, rtol=0, msg=split)
