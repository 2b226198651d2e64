"""FSDP2 (trainer=fsdp, zoo.training.sharding) on gloo CPU processes against one plain process.

- Two processes and one, the same global batch: the same train losses and final weights (1e-5) over 10
  steps, for decoder, encoder and encoder-decoder, with activation checkpointing and with LoRA. The reference
  is the ordinary single-process run (trainer=cpu, no sharding), trained in-process.
- Sharded checkpoints (a folder each rank writes its shards into): a run stopped at step 7 resumes from its
  step-5 checkpoint with the losses of the uninterrupted run (1e-6), at the same world size and at another
  (2 -> 1, 1 -> 2); the folder consolidated into one file loads with zoo.load, and its HF export loads in
  transformers, with the logits of the one-process run's weights.
- `python train.py trainer=fsdp trainer.devices=2` (Lightning starts the second process) and torchrun give the
  same losses.

Cost: the sharded runs are trained once per session (`runs`, shared by the xdist workers through a lock), in
three launches of tests/training/sharded_runs.py (1 process: a run stopped at step 7; 2 processes: the five
cases, a run stopped at step 7 and two resumes; 1 process: a resume), the references in-process; the tests
read what they left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

import zoo
from tests.once import once_per_session
from zoo.checkpoint import read_checkpoint
from zoo.training.consolidate import main as consolidate_main
from zoo.training.run import train

from .conftest import CONF, ROOT, train_losses
from .test_resume_tasks import MLM, RUN, SEQ2SEQ

pytestmark = pytest.mark.e2e  # spawns processes: outside the inner loop

STEPS = ["trainer.max_steps=10", "eval_every=5", "model.dropout=0.0"]  # no dropout: masks differ per rank
LM = ["model=gpt_nano", "data=stdlib_text", "data.max_bytes=120000", "model.max_seq_len=32",
      "model.n_layers=2", *RUN]
SEQ2SEQ_GENERATING = [o for o in SEQ2SEQ if o != "callbacks.exact_match=null"]  # greedy decoding on each rank

# name -> (overrides, per-process batch, one-process batch): the same global batch either way
CASES = {
    "decoder": (LM, ["batch_size=4"], ["batch_size=8"]),
    "encoder": (MLM, ["batch_size=4"], ["batch_size=8"]),
    "encoder_decoder": ([*SEQ2SEQ_GENERATING, "callbacks.exact_match.max_examples=4"], ["batch_size=8"],
                        ["batch_size=16"]),
    "decoder-activation_checkpointing": ([*LM, "memory.activation_checkpointing=true"], ["batch_size=4"],
                                         ["batch_size=8"]),
    "decoder-lora": ([*LM, "finetune=lora", "finetune.targets=[self_attn.qkv,ffn.up]"], ["batch_size=4"],
                     ["batch_size=8"]),
}
RESUMES = {"2to2": (2, 2), "2to1": (2, 1), "1to2": (1, 2)}  # global batch 8 throughout (8 / processes)


def fsdp(devices: int) -> list[str]:
    return ["trainer=fsdp", "trainer.accelerator=cpu", f"trainer.devices={devices}"]


def stopped(before: int) -> dict:
    overrides = [*LM, *STEPS, f"batch_size={8 // before}", *fsdp(before)]
    return {"name": f"stopped{before}", "overrides": overrides, "stop_at": 7}


def resumed(name: str, root: Path) -> dict:
    before, after = RESUMES[name]
    checkpoint = root / f"stopped{before}" / "checkpoints" / "last.ckpt"
    return {"name": name, "overrides": [*LM, *STEPS, f"batch_size={8 // after}", *fsdp(after),
                                        f"ckpt_path={checkpoint}"]}


def launch(root: Path, processes: int, runs: list[dict]) -> None:
    """The runs in turn in `processes` torchrun processes (tests/training/sharded_runs.py)."""
    plan = root / f"plan_{runs[0]['name']}.json"
    plan.write_text(json.dumps({"conf": str(CONF), "root": str(root), "cache_dir": str(root / "cache"),
                                "runs": runs}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update({"HOME": str(root / "home"), "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"})
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
         str(Path(__file__).with_name("sharded_runs.py")), str(plan)],
        cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]


def reference(root: Path, name: str, overrides: list[str]) -> None:
    """The one-process run (trainer=cpu, no sharding), in this process."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, "trainer=cpu", f"paths.output_dir={root / name}",
                                           f"paths.runs_dir={root}", f"paths.cache_dir={root / 'cache'}"])
    train(cfg)


def train_all(root: Path) -> None:
    (root / "home").mkdir(parents=True)
    for case, (overrides, _, one_process) in CASES.items():
        reference(root, f"one-{case}", [*overrides, *STEPS, *one_process])
    launch(root, 1, [stopped(1)])
    launch(root, 2, [*({"name": case, "overrides": [*overrides, *STEPS, *per_process, *fsdp(2)]}
                       for case, (overrides, per_process, _) in CASES.items()),
                     stopped(2), resumed("2to2", root), resumed("1to2", root)])
    launch(root, 1, [resumed("2to1", root)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The folder every run above wrote into (root/<name>), trained once per session."""
    return once_per_session(tmp_path_factory, "sharded_runs", train_all)


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return read_checkpoint(run_dir / "checkpoints" / "last.ckpt")["state_dict"]


@pytest.mark.parametrize("case", list(CASES))
def test_fsdp_two_processes_match_one(runs, case):
    single, two = runs / f"one-{case}", runs / case
    assert (two / "checkpoints" / "last.ckpt" / "__1_0.distcp").is_file()  # rank 1's shards
    one_losses, two_losses = train_losses(single), train_losses(two)
    assert sorted(one_losses) == sorted(two_losses) == list(range(10))
    for step in one_losses:
        assert two_losses[step] == pytest.approx(one_losses[step], abs=1e-5), step
    reference, sharded = final_weights(single), final_weights(two)
    assert sorted(sharded) == sorted(reference)  # the names one process saves
    for name, tensor in reference.items():
        torch.testing.assert_close(sharded[name], tensor, atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize("resume", list(RESUMES))
def test_sharded_checkpoint_resumes_at_any_world_size(runs, resume):
    """Stopped at step 7 (in every process), resumed from the step-5 checkpoint: the uninterrupted losses."""
    before, _ = RESUMES[resume]
    straight = train_losses(runs / "one-decoder")
    checkpoint = runs / f"stopped{before}" / "checkpoints" / "last.ckpt"
    assert sorted(p.name for p in checkpoint.glob("*.distcp")) == [f"__{r}_0.distcp" for r in range(before)]
    losses = train_losses(runs / resume)
    assert sorted(losses) == [5, 6, 7, 8, 9]  # from the step-5 checkpoint
    for step in losses:
        assert losses[step] == pytest.approx(straight[step], abs=1e-6), step


def test_sharded_checkpoint_converts_to_one_file_and_to_hf(runs, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    folder, file = runs / "decoder" / "checkpoints" / "last.ckpt", tmp_path / "one_file.ckpt"
    assert consolidate_main([f"ckpt={folder}", f"out={file}"]) == 0
    assert file.is_file()
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    reference, _ = zoo.load(runs / "one-decoder" / "checkpoints" / "last.ckpt")  # an independent trajectory
    consolidated, _ = zoo.load(file)
    hf = transformers.AutoModelForCausalLM.from_pretrained(zoo.export(folder, tmp_path / "hf", format="hf"))
    with torch.no_grad():
        expected = reference(ids).logits
        torch.testing.assert_close(consolidated(ids).logits, expected, atol=1e-4, rtol=0)
        torch.testing.assert_close(hf.eval()(ids).logits, expected, atol=1e-4, rtol=0)
    assert consolidate_main([f"ckpt={file}", f"out={tmp_path / 'again.ckpt'}"]) == 1
    assert "is a checkpoint file already" in capsys.readouterr().err


def test_plain_launch_matches_torchrun(runs, tmp_path, run_cli):
    """`python train.py trainer=fsdp trainer.devices=2`: Lightning starts the second process itself; the
    runs above joined torchrun's. The same losses either way, and one closing summary."""
    overrides, per_process, _ = CASES["decoder"]
    plain = run_cli([*overrides, *STEPS, *per_process, *fsdp(2), f"hydra.run.dir={tmp_path / 'plain'}",
                     f"paths.cache_dir={runs / 'cache'}"])
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.count("run folder:") == 1, plain.stdout[-3000:]  # one summary, from rank 0
    plain_losses, torchrun_losses = train_losses(tmp_path / "plain"), train_losses(runs / "decoder")
    assert sorted(plain_losses) == sorted(torchrun_losses) == list(range(10))
    for step in plain_losses:
        assert plain_losses[step] == pytest.approx(torchrun_losses[step], abs=1e-6)
