"""Under DDP the sigmoid_bias router follows the whole batch's load: record_load sums each forward's load over
the processes (one all-reduce), so every process moves its bias alike, by the rule on the summed count, with
gradient accumulation too (DDP broadcasts buffers from rank 0 before each forward)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import zoo
from zoo.modules.moe import moe_layers, record_load, update_routers

MOE = {"name": "moe", "n_experts": 4, "top_k": 1, "router": {"name": "sigmoid_bias", "bias_rate": 0.01},
       "balance": {}}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return zoo.build(dict(arch="decoder", vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_seq_len=16,
                          d_ff=24, ffn=MOE, positional="rope", dropout=0.0))


def _rank(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = torch.nn.parallel.DistributedDataParallel(_model())
        gen = torch.Generator().manual_seed(rank)
        loads = []
        for _ in range(2):  # two micro-batches, one optimizer step; rank 0's tokens all alike, rank 1's not
            ids = torch.full((4, 8), 5) if rank == 0 else torch.randint(0, 40, (1, 8), generator=gen)
            with model.no_sync():
                model(ids)
            loads.append(torch.stack([layer.last.load for _, layer in moe_layers(model.module)]))
            record_load(model.module)
        update_routers(model.module)
        biases = torch.stack([layer.router.bias for _, layer in moe_layers(model.module)])
        torch.save({"loads": sum(loads), "biases": biases}, f"{out}/{rank}.pt")
    finally:
        dist.destroy_process_group()


def _rule(load: torch.Tensor) -> torch.Tensor:
    load = load.float()
    return 0.01 * torch.sign(load.mean(-1, keepdim=True) - load)


@pytest.mark.e2e  # two spawned processes, ~40 s on the loaded 2-core machine
def test_two_processes_move_the_bias_by_their_summed_load(tmp_path, unused_tcp_port):
    mp.spawn(_rank, args=(unused_tcp_port, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    total = ranks[0]["loads"] + ranks[1]["loads"]  # (layers, E): both processes, both micro-batches
    assert not torch.equal(_rule(total), _rule(ranks[1]["loads"]))  # the case tells the two rules apart
    for r in ranks:
        torch.testing.assert_close(r["biases"], _rule(total), rtol=0, atol=1e-7)


@pytest.fixture
def unused_tcp_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
