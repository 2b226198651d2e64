"""init_from= takes a sharded checkpoint folder (trainer=fsdp / fsdp_tp's `last.ckpt/`) as it takes a
checkpoint file: the resume refusal between strategies sends the user there for the weights alone."""

from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp

import zoo
from zoo.checkpoint import SHARDED_META, zoo_section
from zoo.finetune.init_from import ZooCheckpoint, open_source
from zoo.tokenizers.trained import train_char


def test_a_sharded_folder_is_a_zoo_checkpoint(tmp_path):
    model = zoo.build("gpt_nano", vocab_size=16, d_model=16, n_layers=1)
    weights = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
    folder = tmp_path / "last.ckpt"  # the layout zoo.training.sharding writes: shards + meta.pt
    dcp.save({"state_dict": weights}, checkpoint_id=folder)  # one process, no process group
    torch.save({"zoo": zoo_section(model.config, "lm", train_char(["abcdef"])), "global_step": 3},
               folder / SHARDED_META)
    source = open_source(str(folder))
    assert isinstance(source, ZooCheckpoint)
    assert source.config().d_model == 16
    state = source.state()
    assert state.keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(state[name], tensor), name
