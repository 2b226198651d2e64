"""trainer=fsdp's plumbing without processes (zoo.training.sharding): what `prepare` refuses before any work,
which modules become shard units, how trainer.* reaches lightning.Trainer. The numerics (two processes
against one) are tests/training/test_sharded.py (e2e)."""

from __future__ import annotations

import pytest
import torch

from zoo.apps import ConfigError
from zoo.presets import build
from zoo.training.plan import prepare
from zoo.training.sharding import FSDPStrategy, shard_units
from zoo.training.strategies import trainer_arguments

from .conftest import TINY_LM


def test_sharded_checkpoint_resumes_only_under_fsdp(make_cfg, tmp_path):
    folder = tmp_path / "earlier" / "checkpoints" / "last.ckpt"
    folder.mkdir(parents=True)
    torch.save({}, folder / "meta.pt")  # what marks a folder of shards; nothing else is read before refusing
    with pytest.raises(ConfigError) as refused:
        prepare(make_cfg([*TINY_LM, "trainer=cpu", f"ckpt_path={folder}"]))
    assert "is a sharded checkpoint (a folder of shards): resume it with trainer=fsdp" in str(refused.value)


def test_fsdp_plan_reaches_the_trainer_as_zoo_strategy(make_cfg):
    plan = prepare(make_cfg([*TINY_LM, "trainer=fsdp", "trainer.accelerator=cpu"]))
    assert plan.trainer_kwargs["strategy"] == "fsdp" and plan.trainer_kwargs["sharded_checkpoint"] is True
    kwargs = trainer_arguments(plan.trainer_kwargs)
    assert "sharded_checkpoint" not in kwargs  # a zoo key, not a lightning.Trainer argument
    assert isinstance(kwargs["strategy"], FSDPStrategy) and kwargs["strategy"]._save_distributed_checkpoint
    plain = trainer_arguments({"strategy": "ddp", "devices": 2})
    assert plain == {"strategy": "ddp", "devices": 2}  # Lightning's names pass unchanged


@pytest.mark.parametrize(("preset", "overrides", "units"), [
    ("gpt_nano", {"n_layers": 3}, 3),
    ("bert_small", {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_ff": 64}, 2),
    ("transformer_tiny", {"encoder_layers": 1, "decoder_layers": 2}, 3),
])
def test_one_shard_unit_per_block_and_the_tied_head_in_the_root(preset, overrides, units):
    with torch.device("meta"):
        model = build(preset, **overrides)
    blocks = shard_units(model)
    assert len(blocks) == units and all(type(b).__name__ == "Block" for b in blocks)
    in_blocks = {id(p) for block in blocks for p in block.parameters()}
    table = model.decoder_embed.tokens.weight
    assert id(table) not in in_blocks  # embeddings: the root unit
    if model.config.tie_embeddings:
        assert model.head.proj.weight is table  # tied: one parameter, so one unit holds it


@pytest.mark.parametrize("preset", ["deepseek_v3_671b", "deepseek_v2_lite"])  # sigmoid_bias; softmax_topk
def test_a_bf16_deepseek_model_shards_with_its_float32_routers(tmp_path, preset):
    """precision=bf16-true under trainer=fsdp: DeepSeek's routers stay float32 in a bf16 model, and FSDP2
    wants one dtype in a unit, so each such router is a unit of its own, kept float32 (also under bf16-mixed's
    policy); the model shards, trains a step and routes as before sharding (one process, gloo). V2-Lite's
    plain top-k is float32 by its router.float32 setting."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from tests.models.tiny import tiny
    from zoo.modules.moe.routers import Router
    from zoo.training.sharding import fully_shard_model

    model = tiny(preset).to(torch.bfloat16)
    routers = [m for m in model.modules() if isinstance(m, Router)]
    assert routers and all(m.float32 for m in routers)
    assert [u for u in shard_units(model) if isinstance(u, Router)] == routers
    ids = torch.randint(3, model.config.vocab_size, (2, 8))
    with torch.no_grad():
        want = model(ids).logits
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        fully_shard_model(model, init_device_mesh("cpu", (1,)))
        out = model(ids, labels=ids)
        out.loss.backward()
        assert torch.equal(out.logits.detach(), want)
        assert all(p.grad is not None and p.dtype == torch.float32 for m in routers for p in m.parameters())
    finally:
        dist.destroy_process_group()
