"""bench/gpu_sharded.py without GPUs (the script needs several and was not run): the DDP and FSDP2 sides run
end to end on 2 gloo CPU processes with a tiny model and fill the table (DDP, FSDP2, and FSDP2 with 2-way
tensor parallelism, whose tokens/s counts the one batch its group reads); the real check refuses to start
with fewer than 2 CUDA devices."""

from __future__ import annotations

import pytest

from bench.gpu_sharded import ShardedPlan, measure, run, section


@pytest.mark.e2e  # spawns 2 processes per side
def test_every_side_runs_on_two_cpu_processes():
    plan = ShardedPlan.dry_run()
    result = measure(plan)
    assert set(result) == {"ddp", "fsdp", "fsdp_tp"} and all(v["tokens_per_s"] > 0 for v in result.values())
    assert plan.data_parallel("fsdp_tp") == 1 and plan.data_parallel("fsdp") == 2
    assert all(len(v["peak_gib"]) == plan.world for v in result.values())  # one per rank
    md = section(plan, result).markdown()
    assert "| ddp |" in md and "| fsdp |" in md and "| fsdp_tp |" in md and "not a measurement" in md


def test_the_real_check_refuses_without_two_gpus(monkeypatch):
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    with pytest.raises(RuntimeError, match="needs 2 or more CUDA devices"):
        run()
    assert ShardedPlan.gpu(4).world == 4 and ShardedPlan.gpu(4).device == "cuda"
