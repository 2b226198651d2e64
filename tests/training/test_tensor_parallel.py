"""Tensor parallelism with FSDP2 (trainer=fsdp_tp, zoo.training.tensor_parallel) on gloo CPU processes
against one plain process (trainer=cpu, fused layout, the same global batch).

- tp_size=2 on 2 processes (dp=1): the same train losses and final weights (fused back) as one process
  (1e-5) over 10 steps, for decoder, encoder and encoder-decoder, a GQA + SwiGLU + RoPE decoder with LoRA
  (fused qkv, o and up adapted: column- and row-wise LoRA styles), and with activation checkpointing (and
  full-file checkpoints), a Mixture-of-Experts decoder (every expert split, the router whole) and an ALiBi
  decoder (its per-head bias cut to each rank's heads).
- The 2-D mesh: 4 processes as dp=2 x tp=2 (each group reads its half of the global batch), the same.
- Sharded checkpoints hold the unfused parts: a run stopped at step 7 resumes from its step-5 checkpoint with
  the uninterrupted losses, at tp 2 -> 2, into the 2 x 2 mesh (another world size) and at tp_size 1 (dp 2;
  DCP reshards the DTensors); the folder loads with zoo.load, consolidates into one file and exports to HF
  with the one-process logits.
- Resuming it under trainer=fsdp (fused parameters), or a fused checkpoint under fsdp_tp, is refused.

Cost: trained once per session (`runs`, shared by the xdist workers through a lock) in two launches of
tests/training/sharded_runs.py (2 processes: the seven cases, a stopped run, two resumes; 4 processes: the
2 x 2 mesh and a resume), the references in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader

import zoo
from tests.once import once_per_session
from zoo.apps import ConfigError
from zoo.checkpoint import read_checkpoint
from zoo.training.consolidate import main as consolidate_main
from zoo.training.plan import prepare
from zoo.training.run import open_run

from .conftest import train_losses
from .test_sharded import CASES, LM, STEPS, launch, reference

pytestmark = pytest.mark.e2e  # spawns processes: outside the inner loop

# name -> (overrides, one-process reference run); with tp_size = processes (dp = 1) every process reads the
# whole global batch: the one-process batch. Activation checkpointing changes no number: its run (which also
# writes full-file checkpoints, from rank 0) is held to the plain decoder's reference.
GQA_LORA = [*LM, "model.n_heads=4", "model.n_kv_heads=2", "model.activation=swiglu", "model.positional=rope",
            "finetune=lora", "finetune.targets=[self_attn.qkv,self_attn.o,ffn.up]"]
MOE = ["model=moe_small", "model.d_model=32", "model.n_heads=4", "model.n_kv_heads=2", "model.d_ff=32",
       "model.ffn.n_experts=4", *LM[1:]]  # every expert split as a dense FFN is, the router whole
REFERENCES = {"decoder": CASES["decoder"][0] + CASES["decoder"][2],
              "encoder": CASES["encoder"][0] + CASES["encoder"][2],
              "encoder_decoder": CASES["encoder_decoder"][0] + CASES["encoder_decoder"][2],
              "decoder-gqa-lora": [*GQA_LORA, "batch_size=8"],
              "decoder-moe": [*MOE, "batch_size=8"],
              "decoder-alibi": [*LM, "model.positional=alibi", "batch_size=8"]}  # bias cut per rank's heads
CHECKPOINTING = [*REFERENCES["decoder"], "memory.activation_checkpointing=true",
                 "trainer.sharded_checkpoint=false"]
TP_CASES = {**{name: (overrides, name) for name, overrides in REFERENCES.items()},
            "decoder-activation_checkpointing-full_file": (CHECKPOINTING, "decoder")}
# name -> (processes, tp_size) after; stopped with 2 processes at tp_size 2; global batch 8 throughout
RESUMES = {"2to2": (2, 2), "2to4": (4, 2), "tp2to1": (2, 1)}


def fsdp_tp(devices: int, tp_size: int = 2) -> list[str]:
    return ["trainer=fsdp_tp", "trainer.accelerator=cpu", f"trainer.devices={devices}",
            f"trainer.tp_size={tp_size}"]


def per_group_batch(devices: int, tp_size: int = 2) -> str:
    return f"batch_size={8 // (devices // tp_size)}"  # 8 over the devices / tp_size data-parallel groups


def resumed(name: str, root: Path) -> dict:
    (devices, tp_size), checkpoint = RESUMES[name], root / "stopped" / "checkpoints" / "last.ckpt"
    return {"name": name, "overrides": [*LM, *STEPS, per_group_batch(devices, tp_size),
                                        *fsdp_tp(devices, tp_size), f"ckpt_path={checkpoint}"]}


def train_all(root: Path) -> None:
    (root / "home").mkdir(parents=True)
    for name, overrides in REFERENCES.items():
        reference(root, f"one-{name}", [*overrides, *STEPS])
    stopped = {"name": "stopped", "overrides": [*LM, *STEPS, per_group_batch(2), *fsdp_tp(2)], "stop_at": 7}
    launch(root, 2, [*({"name": case, "overrides": [*overrides, *STEPS, *fsdp_tp(2)]}
                       for case, (overrides, _) in TP_CASES.items()),
                     stopped, resumed("2to2", root), resumed("tp2to1", root)])
    launch(root, 4, [{"name": "mesh2x2", "overrides": [*LM, *STEPS, per_group_batch(4), *fsdp_tp(4)]},
                     resumed("2to4", root)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The folder every run above wrote into (root/<name>), trained once per session."""
    return once_per_session(tmp_path_factory, "tensor_parallel_runs", train_all)


def last(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / "last.ckpt"


def assert_matches_one_process(runs: Path, reference_run: str, run: str) -> None:
    one_losses, tp_losses = train_losses(runs / reference_run), train_losses(runs / run)
    assert sorted(one_losses) == sorted(tp_losses) == list(range(10))
    for step in one_losses:
        assert tp_losses[step] == pytest.approx(one_losses[step], abs=1e-5), step
    reference_weights = read_checkpoint(last(runs / reference_run))["state_dict"]
    weights = read_checkpoint(last(runs / run))["state_dict"]  # the unfused parts, fused back
    assert sorted(weights) == sorted(reference_weights)
    for name, tensor in reference_weights.items():
        torch.testing.assert_close(weights[name], tensor, atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize("case", list(TP_CASES))
def test_tensor_parallel_two_processes_match_one(runs, case):
    checkpoint = last(runs / case)
    saved = (FileSystemReader(checkpoint).read_metadata().state_dict_metadata if checkpoint.is_dir()
             else torch.load(checkpoint, weights_only=True)["state_dict"])
    assert any(k.endswith(".self_attn.qkv.q.weight") for k in saved)  # the checkpoint holds the parts
    assert not any(k.endswith(".self_attn.qkv.weight") for k in saved)
    assert read_checkpoint(checkpoint)["zoo"]["layout"] == "unfused"
    assert_matches_one_process(runs, f"one-{TP_CASES[case][1]}", case)


def test_two_by_two_mesh_matches_one_process(runs):
    """dp=2 x tp=2 in 4 processes: each tensor-parallel pair reads half of the global batch."""
    assert sorted(p.name for p in last(runs / "mesh2x2").glob("*.distcp")) == [
        f"__{r}_0.distcp" for r in range(4)]
    assert_matches_one_process(runs, "one-decoder", "mesh2x2")


@pytest.mark.parametrize("resume", list(RESUMES))
def test_tensor_parallel_checkpoint_resumes(runs, resume):
    """Stopped at step 7, resumed from the step-5 checkpoint (2 processes, tp 2), in 2 processes, in the
    2 x 2 mesh, or in 2 processes at tp_size 1 (dp 2): the uninterrupted run's losses."""
    straight = train_losses(runs / "decoder")
    losses = train_losses(runs / resume)
    assert sorted(losses) == [5, 6, 7, 8, 9]
    for step in losses:
        assert losses[step] == pytest.approx(straight[step], abs=1e-6), step


def test_tensor_parallel_checkpoint_loads_consolidates_and_exports(runs, tmp_path):
    transformers = pytest.importorskip("transformers")
    folder, file = last(runs / "decoder"), tmp_path / "one_file.ckpt"
    assert consolidate_main([f"ckpt={folder}", f"out={file}"]) == 0
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    reference_model, _ = zoo.load(last(runs / "one-decoder"))  # an independent trajectory
    hf = transformers.AutoModelForCausalLM.from_pretrained(zoo.export(folder, tmp_path / "hf", format="hf"))
    with torch.no_grad():
        expected = reference_model(ids).logits
        for loaded in (zoo.load(folder)[0], zoo.load(file)[0]):
            torch.testing.assert_close(loaded(ids).logits, expected, atol=1e-4, rtol=0)
        torch.testing.assert_close(hf.eval()(ids).logits, expected, atol=1e-4, rtol=0)
    assert "layout" not in torch.load(file, weights_only=True)["zoo"]  # the file holds the fused layout


@pytest.mark.parametrize(("strategy", "checkpoint", "written"), [
    (["trainer=fsdp", "trainer.accelerator=cpu"], "decoder", "trainer.strategy=fsdp_tp"),
    (fsdp_tp(2), "one-decoder", "a strategy other than fsdp_tp"),
])
def test_resume_across_layouts_is_refused(runs, make_cfg, strategy, checkpoint, written):
    cfg = make_cfg([*LM, *STEPS, "batch_size=8", *strategy, f"ckpt_path={last(runs / checkpoint)}"])
    with pytest.raises(ConfigError) as refused:
        open_run(prepare(cfg))
    assert f"was written by {written}" in str(refused.value)
    assert f"this run is trainer.strategy={'fsdp' if written.startswith('trainer') else 'fsdp_tp'}" in str(
        refused.value)
