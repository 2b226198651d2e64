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
