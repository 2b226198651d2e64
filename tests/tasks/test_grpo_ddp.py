"""task=grpo on several processes: prompts split by rank with each group of num_generations on one rank,
each rank's loss weighed by what its loss type is a mean over (so the processes' averaged gradient is one
process's on the whole generation batch), and the logged metrics those of the whole generation batch."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zoo.tasks.grpo import ROLLOUT, GRPORun, grpo_settings
from zoo.tasks.grpo_batch import RolloutBatch
from zoo.tasks.grpo_losses import Rollouts, grpo_loss

from .test_grpo import write_prompts

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_ranks_weighed_by_the_loss_types_count_give_the_one_process_loss_and_gradient(loss_type):
    """Rollouts of 6 completions of different lengths shared 4 + 2 between two ranks: each rank's loss times
    count * world / total count (ZooLightningModule._global_mean, with the task's counted_labels), averaged
    as DDP averages, equals the loss and gradient of one process on all 6. With tokens as the count (before)
    grpo and dr_grpo were off (they are means over completions)."""
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0],
                         [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    logps = torch.randn(6, 6, requires_grad=True)
    old, advantages = logps.detach() + 0.1 * torch.randn(6, 6), torch.randn(6)
    settings = grpo_settings({"rewards": ["answer_match"], "loss_type": loss_type, "num_generations": 2,
                              "max_completion_length": 6})
    run = GRPORun(torch.nn.Linear(1, 1), None, settings, [])

    def loss_of(rows: slice) -> torch.Tensor:
        return grpo_loss(Rollouts(logps[rows], mask[rows].float(), advantages[rows], old[rows]), settings)

    def count(rows: slice) -> torch.Tensor:
        rollout = RolloutBatch(mask[rows], mask[rows], mask[rows], mask[rows], advantages[rows])
        return run.counted_labels({ROLLOUT: rollout}).float()

    whole = loss_of(slice(None))
    (expected,) = torch.autograd.grad(whole, logps)
    shares, world = [slice(0, 4), slice(4, 6)], 2
    total = sum(count(s) for s in shares)
    ddp = sum(loss_of(s) * count(s) * world / total for s in shares) / world  # DDP's mean of the gradients
    (got,) = torch.autograd.grad(ddp, logps)
    torch.testing.assert_close(ddp, whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def records(folder: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (folder / f"rank{rank}.jsonl").read_text().splitlines()]


@pytest.mark.e2e  # two train.py runs, one of them two gloo processes: ~40 s
def test_two_processes_split_the_prompts_keep_groups_whole_and_log_the_whole_batch(tmp_path):
    """trainer=ddp_cpu, batch_size=2 per process, 4 completions per prompt, against one process with
    batch_size=4 (the same global batch): at every step the two ranks scored different prompts, each prompt's
    4 completions on one rank, together the one process's prompts of that step; the logged
    rewards/<f>/mean is the mean over both ranks' completions, and every rank trained (the loss is logged)."""
    prompts = write_prompts(tmp_path / "prompts.jsonl")
    common = ["task=grpo", "model=gpt_nano", "model.max_seq_len=32", "tokenizer=char", "data=prompts",
              f"data.path={prompts}", "grpo.rewards=[tests.tasks.grpo_user_rewards:logged_by_rank]",
              "grpo.num_generations=4", "grpo.max_completion_length=4", "trainer.max_steps=3",
              "eval_every=100",
              "trainer.num_sanity_val_steps=0", "trainer.limit_val_batches=0", "logger=csv",
              "trainer.log_every_n_steps=1", "callbacks.samples=null", "callbacks.test=null",
              f"paths.runs_dir={tmp_path / 'runs'}", f"paths.cache_dir={tmp_path / 'cache'}"]
    logs = {}
    runs = (("one", ["trainer=cpu", "batch_size=4"]), ("two", ["trainer=ddp_cpu", "batch_size=2"]))
    for name, extra in runs:
        logs[name] = tmp_path / f"log_{name}"
        logs[name].mkdir()
        env = {**os.environ, "ZOO_TEST_REWARD_LOG": str(logs[name]), "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, str(ROOT / "train.py"), *common, *extra,
                               f"paths.output_dir={tmp_path / name}"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
    one, rank0, rank1 = records(logs["one"], 0), records(logs["two"], 0), records(logs["two"], 1)
    assert len(one) == len(rank0) == len(rank1) == 3
    with open(tmp_path / "two" / "csv" / "metrics.csv", encoding="utf-8") as f:
        logged = [row for row in csv.DictReader(f) if row.get("train/loss")]
    assert len(logged) == 3
    for step, (a, b, single) in enumerate(zip(rank0, rank1, one, strict=True)):
        for share in (a, b):  # groups of 4 consecutive completions of one prompt
            groups = [share["prompts"][i:i + 4] for i in range(0, len(share["prompts"]), 4)]
            assert len(groups) == 2 and all(len(set(g)) == 1 for g in groups)
        mine, theirs = {g for g in a["prompts"]}, {g for g in b["prompts"]}
        assert not mine & theirs, step  # different prompts on the two ranks
        assert sorted(a["prompts"] + b["prompts"]) == sorted(single["prompts"]), step
        expected = sum(a["values"] + b["values"]) / 16  # 2 ranks x 2 prompts x 4 completions
        got = float(logged[step]["train/rewards/logged_by_rank/mean"])
        assert got == pytest.approx(expected, abs=1e-5), step


@pytest.mark.e2e  # one train.py run of two gloo processes with W&B offline: ~30 s
def test_the_rollouts_table_of_two_processes_holds_every_ranks_completions(tmp_path):
    """trainer=ddp_cpu, 2 prompts x 4 completions per process, the rollouts table logged at every step with
    room for 100 rows: each table (rank 0 logs it) holds the 16 completions of the whole generation batch,
    the prompts both ranks scored at that step and each row's reward that rank's value for it. Before: the 8
    of rank 0 only."""
    import glob

    from tests.training.wandb_reader import history

    log = tmp_path / "log"
    log.mkdir()
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "task=grpo", "model=gpt_nano", "model.max_seq_len=32",
         "tokenizer=char", "data=prompts", f"data.path={write_prompts(tmp_path / 'prompts.jsonl')}",
         "grpo.rewards=[tests.tasks.grpo_user_rewards:logged_by_rank]", "grpo.num_generations=4",
         "grpo.max_completion_length=4", "trainer=ddp_cpu", "batch_size=2", "trainer.max_steps=2",
         "eval_every=100", "trainer.num_sanity_val_steps=0", "trainer.limit_val_batches=0", "logger=wandb",
         "callbacks.samples=null", "callbacks.test=null", "callbacks.rollouts.every_n_steps=1",
         "callbacks.rollouts.num_shown=100", f"paths.output_dir={run_dir}",
         f"paths.runs_dir={tmp_path / 'runs'}", f"paths.cache_dir={tmp_path / 'cache'}"],
        cwd=tmp_path, env={**os.environ, "WANDB_MODE": "offline", "ZOO_TEST_REWARD_LOG": str(log),
                           "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    rank0, rank1 = records(log, 0), records(log, 1)
    assert len(rank0) == len(rank1) == 2
    [run_file] = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    tables = [row for row in history(Path(run_file)) if "rollouts/_type" in row]
    assert len(tables) == 2, tables
    for step, (row, a, b) in enumerate(zip(tables, rank0, rank1, strict=True)):
        assert row["rollouts/nrows"] == 16, (step, row)
        [path] = glob.glob(str(Path(run_file).parent / "files" / row["rollouts/path"]))
        table = json.loads(Path(path).read_text())
        assert {r[0] for r in table["data"]} == {step}
        scored = sorted(zip(a["prompts"] + b["prompts"], a["values"] + b["values"], strict=True))
        shown = sorted((r[1], r[3]) for r in table["data"])  # (prompt, logged_by_rank's value)
        assert [p for p, _ in shown] == [p for p, _ in scored], step
        assert [v for _, v in shown] == pytest.approx([v for _, v in scored]), step
