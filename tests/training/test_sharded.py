"""FSDP2 (trainer=fsdp, zoo.training.sharding) on gloo CPU processes against one plain process.

- Two processes and one, the same global batch: the same train losses and final weights (1e-5) over 10
  steps, for decoder, encoder and encoder-decoder, with activation checkpointing and with LoRA. The reference
  is the ordinary single-process run (trainer=cpu, no sharding), trained in-process.
- Sharded checkpoints (a folder each rank writes its shards into): a run stopped at step 7 resumes from its
  step-5 checkpoint with the losses of the uninterrupted run (1e-6), at the same world size and at another
  (2 -> 1, 1 -> 2); the folder consolidated into one file loads with zoo.load, and its HF export loads in
  transformers, with the logits of the one-process run's weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
from zoo.checkpoint import read_checkpoint
from zoo.training.consolidate import main as consolidate_main
from zoo.training.run import train

from .conftest import ROOT, train_losses
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

# train.py stopped by an exception at the end of step 7 in every process (after the step-5 checkpoint)
STOPPED_TRAIN = f'''
import runpy
from zoo.training.module import ZooLightningModule

def stop(self, outputs, batch, batch_idx):
    if self.global_step == 7:
        raise RuntimeError("simulated kill")

ZooLightningModule.on_train_batch_end = stop
runpy.run_path({str(ROOT / "train.py")!r}, run_name="__main__")
'''


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return read_checkpoint(run_dir / "checkpoints" / "last.ckpt")["state_dict"]


def fsdp(devices: int, run_dir: Path, cache_dir: Path) -> list[str]:
    return ["trainer=fsdp", "trainer.accelerator=cpu", f"trainer.devices={devices}",
            f"hydra.run.dir={run_dir}", f"paths.cache_dir={cache_dir}"]


@pytest.mark.parametrize("case", list(CASES))
def test_fsdp_two_processes_match_one(tmp_path, run_cli, make_cfg, cache_dir, case):
    overrides, per_process, one_process = CASES[case]
    common = [*overrides, *STEPS]
    single = train(make_cfg([*common, *one_process, "trainer=cpu"], run="one")).output_dir
    two = run_cli([*common, *per_process, *fsdp(2, tmp_path / "two", cache_dir)])
    assert two.returncode == 0, two.stderr[-3000:]
    assert (tmp_path / "two" / "checkpoints" / "last.ckpt" / "__1_0.distcp").is_file()  # rank 1's shards
    one_losses, two_losses = train_losses(single), train_losses(tmp_path / "two")
    assert sorted(one_losses) == sorted(two_losses) == list(range(10))
    for step in one_losses:
        assert two_losses[step] == pytest.approx(one_losses[step], abs=1e-5), step
    reference, sharded = final_weights(single), final_weights(tmp_path / "two")
    assert sorted(sharded) == sorted(reference)  # the names one process saves
    for name, tensor in reference.items():
        torch.testing.assert_close(sharded[name], tensor, atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize(("before", "after"), [(2, 2), (2, 1), (1, 2)], ids=["2to2", "2to1", "1to2"])
def test_sharded_checkpoint_resumes_at_any_world_size(tmp_path, run_cli, make_cfg, cache_dir, before, after):
    """Global batch 8 throughout (batch_size 8 / processes)."""
    common = [*LM, *STEPS]
    straight = train_losses(train(make_cfg([*common, "batch_size=8", "trainer=cpu"], run="one")).output_dir)
    (tmp_path / "stopped_train.py").write_text(STOPPED_TRAIN)
    stopped = run_cli([*common, f"batch_size={8 // before}", *fsdp(before, tmp_path / "stopped", cache_dir)],
                      script=tmp_path / "stopped_train.py")
    assert stopped.returncode != 0 and "simulated kill" in stopped.stderr, stopped.stderr[-3000:]
    checkpoint = tmp_path / "stopped" / "checkpoints" / "last.ckpt"
    assert sorted(p.name for p in checkpoint.glob("*.distcp")) == [f"__{r}_0.distcp" for r in range(before)]
    resumed = run_cli([*common, f"batch_size={8 // after}", f"ckpt_path={checkpoint}",
                       *fsdp(after, tmp_path / "resumed", cache_dir)])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    losses = train_losses(tmp_path / "resumed")
    assert sorted(losses) == [5, 6, 7, 8, 9]  # from the step-5 checkpoint
    for step in losses:
        assert losses[step] == pytest.approx(straight[step], abs=1e-6), step


def test_sharded_checkpoint_converts_to_one_file_and_to_hf(tmp_path, run_cli, make_cfg, cache_dir, capsys):
    transformers = pytest.importorskip("transformers")
    common = [*LM, *STEPS]
    single = train(make_cfg([*common, "batch_size=8", "trainer=cpu"], run="one")).last_checkpoint
    two = run_cli([*common, "batch_size=4", *fsdp(2, tmp_path / "two", cache_dir)])
    assert two.returncode == 0, two.stderr[-3000:]
    folder, file = tmp_path / "two" / "checkpoints" / "last.ckpt", tmp_path / "one_file.ckpt"
    assert consolidate_main([f"ckpt={folder}", f"out={file}"]) == 0
    assert file.is_file()
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    reference, _ = zoo.load(single)  # the one-process run: an independent trajectory to 1e-5
    consolidated, _ = zoo.load(file)
    hf = transformers.AutoModelForCausalLM.from_pretrained(zoo.export(folder, tmp_path / "hf", format="hf"))
    with torch.no_grad():
        expected = reference(ids).logits
        torch.testing.assert_close(consolidated(ids).logits, expected, atol=1e-4, rtol=0)
        torch.testing.assert_close(hf.eval()(ids).logits, expected, atol=1e-4, rtol=0)
    assert consolidate_main([f"ckpt={file}", f"out={tmp_path / 'again.ckpt'}"]) == 1
    assert "is a checkpoint file already" in capsys.readouterr().err


def test_torchrun_and_plain_launch_give_the_same_losses(tmp_path, run_cli, cache_dir):
    """Lightning starts the second process itself (plain) or joins torchrun's: the same run either way."""
    common = [*LM, *STEPS, "batch_size=4", "trainer.max_steps=4", "eval_every=4"]
    plain = run_cli([*common, *fsdp(2, tmp_path / "plain", cache_dir)])
    assert plain.returncode == 0, plain.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}  # as run_cli's
    env.update({"HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"})
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(ROOT / "train.py"), *common, *fsdp(2, tmp_path / "torchrun", cache_dir)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert launched.returncode == 0, launched.stderr[-3000:]
    plain_losses, torchrun_losses = train_losses(tmp_path / "plain"), train_losses(tmp_path / "torchrun")
    assert sorted(plain_losses) == sorted(torchrun_losses) == [0, 1, 2, 3]
    for step in plain_losses:
        assert torchrun_losses[step] == pytest.approx(plain_losses[step], abs=1e-6)
