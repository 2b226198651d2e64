"""The sharded half of the GPU check (bench/gpu.py is the one-card half), planned for a machine with several
GPUs and NOT run yet (none here): training tokens/s and peak memory per device of DDP against FSDP2
(zoo.training.sharding.fully_shard_model, the sharding trainer=fsdp applies) and against FSDP2 with tensor
parallelism on a (world / tp, tp) mesh (zoo.training.tensor_parallel.parallelize_tensors, what trainer=fsdp_tp
applies), side by side in one run, for a preset large enough that sharding matters. `world` processes
start once (torch.multiprocessing, nccl) and run each side in turn; a side trains `steps` steps of the LM
loss with AdamW under bf16 autocast (DDP) or FSDP2's bf16 parameters with fp32 reduction, and rank 0 reports
the median step time and every rank's peak memory.

`python -m bench.gpu_sharded` on a machine with >= 2 GPUs (`--world N`); `--dry-run` runs the same code on 2
gloo CPU processes with a tiny model and fp32 (tests do this: it checks the code paths, it measures
nothing worth keeping)."""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from bench.common import Section, markdown_table
from bench.gpu import bf16_autocast, lm_backward, training_model

SIDES = ("ddp", "fsdp", "fsdp_tp")


@dataclass(frozen=True)
class ShardedPlan:
    """What is measured: the real check (CUDA, nccl, bf16) or the CPU dry run (gloo, fp32, tiny)."""

    device: str
    world: int
    preset: str
    overrides: dict = field(default_factory=dict)
    batch: int = 8  # per device
    seq_len: int = 1024
    steps: int = 10  # timed steps per side, after 2 untimed ones
    tp: int = 2  # fsdp_tp: tensor-parallel size (the ranks of a group read the same batch)

    def data_parallel(self, side: str) -> int:
        """Processes that read distinct batches on `side`."""
        return self.world // self.tp if side == "fsdp_tp" else self.world

    @classmethod
    def gpu(cls, world: int | None = None) -> ShardedPlan:
        return cls("cuda", world or torch.cuda.device_count(), "llama3_2_1b", {"dropout": 0.0})

    @classmethod
    def dry_run(cls) -> ShardedPlan:
        return cls("cpu", 2, "gpt2", {"n_layers": 2, "d_model": 32, "n_heads": 2, "vocab_size": 128,
                                      "max_seq_len": 32, "dropout": 0.0}, batch=2, seq_len=16, steps=2)


def _train_side(rank: int, plan: ShardedPlan, side: str, device: torch.device) -> dict | None:
    """One process's part of one side: build, wrap (DDP) or shard (FSDP2), train; rank 0 gets the result."""
    from zoo.training.sharding import fully_shard_model

    cuda = plan.device == "cuda"
    model, ids = training_model(plan, device)
    if side in ("fsdp", "fsdp_tp"):
        from torch.distributed.device_mesh import init_device_mesh

        if side == "fsdp_tp":
            from zoo.training.tensor_parallel import parallelize_tensors

            mesh = init_device_mesh(plan.device, (plan.data_parallel(side), plan.tp),
                                    mesh_dim_names=("data_parallel", "tensor_parallel"))
            parallelize_tensors(model, mesh["tensor_parallel"])
            mesh = mesh["data_parallel"]
        else:
            mesh = init_device_mesh(plan.device, (plan.world,))
        forward = fully_shard_model(model, mesh, mixed_bf16=cuda)
        autocast = bf16_autocast(plan.device, False)  # FSDP2 casts the gathered parameters itself
    else:
        forward = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if cuda else None)
        autocast = bf16_autocast(plan.device, cuda)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    seconds = []
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    for step in range(plan.steps + 2):
        start = time.perf_counter()
        lm_backward(forward, ids, autocast)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        if step >= 2:
            seconds.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else float("nan")
    gathered: list = [None] * plan.world
    dist.all_gather_object(gathered, (statistics.median(seconds), peak))
    if rank != 0:
        return None
    return {"step_s": max(s for s, _ in gathered), "peak_gib": [m for _, m in gathered]}


def _train(rank: int, plan: ShardedPlan, init_file: str, out: dict) -> None:
    """One process: join the group once, then each side in turn (the processes start once for both)."""
    cuda = plan.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device(plan.device, rank) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=plan.world)
    try:
        for side in SIDES:
            result = _train_side(rank, plan, side, device)
            if rank == 0:
                out[side] = result
            gc.collect()  # the side's model, wrapper and optimizer go before the next side's peak is measured
            dist.barrier()
    finally:
        dist.destroy_process_group()


def measure(plan: ShardedPlan) -> dict:
    """side -> {tokens_per_s (all devices), per_device_tokens_per_s, peak_gib per rank}."""
    import torch.multiprocessing as mp

    with mp.Manager() as manager, tempfile.TemporaryDirectory() as folder:
        out = manager.dict()
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        mp.spawn(_train, args=(plan, os.path.join(folder, "init"), out), nprocs=plan.world)
        results = dict(out)
    tokens = {side: plan.batch * plan.seq_len * plan.data_parallel(side) for side in SIDES}  # distinct ones
    return {side: {"tokens_per_s": tokens[side] / results[side]["step_s"],
                   "peak_gib": results[side]["peak_gib"]} for side in SIDES}


def section(plan: ShardedPlan, r: dict) -> Section:
    base = r["ddp"]["tokens_per_s"]
    gib = lambda v: "n/a" if v != v else f"{v:.2f}"  # noqa: E731  (NaN: no CUDA memory counter on CPU)
    rows = [[side, f"{v['tokens_per_s']:,.0f}", f"{v['tokens_per_s'] / plan.world:,.0f}",
             f"{v['tokens_per_s'] / base:.2f}", gib(max(v["peak_gib"]))] for side, v in r.items()]
    table = markdown_table([f"training (`{plan.preset}`, {plan.world} x {plan.device})", "tokens/s",
                            "per device", "vs DDP", "peak memory GiB (max rank)"], rows)
    precision = ("DDP: bf16 autocast; FSDP2: bf16 parameters, fp32 reduction" if plan.device == "cuda"
                 else "fp32, gloo: a dry run of the code paths, not a measurement")
    notes = [f"B={plan.batch} per device, T={plan.seq_len}, median of {plan.steps} steps after 2 untimed "
             f"(the slowest rank's); FSDP2: one shard unit per block; fsdp_tp: tp={plan.tp}, "
             f"{plan.world // plan.tp} data-parallel groups, tokens/s counts distinct tokens (a group's "
             f"ranks read one batch); AdamW; {precision}."]
    return Section("GPU check, sharded", table, notes, {"result": r})


def run(world: int | None = None) -> Section:
    """The real check; it refuses without 2 or more CUDA devices (nothing is stored)."""
    if torch.cuda.device_count() < 2:
        raise RuntimeError("the sharded GPU check needs 2 or more CUDA devices "
                           "(python -m bench.gpu_sharded --dry-run checks it on CPU)")
    plan = ShardedPlan.gpu(world)
    return section(plan, measure(plan))


def dry_run() -> Section:
    plan = ShardedPlan.dry_run()
    return section(plan, measure(plan))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="2 gloo CPU processes, a tiny model")
    parser.add_argument("--world", type=int, default=None, help="GPUs to use (default: all)")
    args = parser.parse_args()
    print((dry_run() if args.dry_run else run(args.world)).markdown())
