"""finetune=qlora under FSDP2 (trainer=fsdp, zoo.training.sharding) on two gloo CPU processes of 4 rows each
trains as one plain process of 8 does: the same train losses and final adapters (1e-5). FSDP2 shards
parameters only, so the adapters (and the float embeddings, norms and head) are sharded while each rank keeps
the whole NF4 base (buffers); the sharded checkpoint holds that base unchanged, and its consolidated file
exports to an fp32 model. trainer=fsdp_tp is refused before work starts (tests/training/bad_inputs.py)."""

from __future__ import annotations

from importlib.util import find_spec

import pytest
import torch

import zoo
from zoo.checkpoint import read_checkpoint
from zoo.modules.qlora import QLoRALinear
from zoo.training.consolidate import main as consolidate_main

from .conftest import one_and_two_fsdp
from .test_resume_tasks import RUN

# found, not imported: collecting this file (every xdist worker does) does not pay bitsandbytes' import
NEEDS_BITSANDBYTES = pytest.mark.skipif(find_spec("bitsandbytes") is None,
                                        reason="the qlora extra (pip install 'zoo[qlora]')")
pytestmark = [pytest.mark.e2e, NEEDS_BITSANDBYTES]  # spawns two processes

QLORA = ["model=gpt_nano", "data=stdlib_text", "data.max_bytes=120000", "model.max_seq_len=32",
         "model.dropout=0.0", "finetune=qlora", "finetune.block_size=32", "finetune.rank=4",
         "trainer.max_steps=4", "eval_every=2", *RUN]  # no dropout: masks differ per rank


def test_two_fsdp_processes_match_one(tmp_path, run_cli, make_cfg, cache_dir):
    one, folder = one_and_two_fsdp(tmp_path, run_cli, make_cfg, cache_dir, QLORA, batch_size=8, steps=4)
    expected = read_checkpoint(one / "checkpoints" / "last.ckpt")["state_dict"]
    weights = read_checkpoint(folder)["state_dict"]
    assert sorted(weights) == sorted(expected)
    base = "model.decoder_stack.layers.0.self_attn.qkv"
    assert weights[f"{base}.weight_nf4"].dtype == torch.uint8 and f"{base}.weight" not in weights
    assert weights[f"{base}.lora_B"].abs().max() > 0  # the adapters trained
    for name, tensor in expected.items():
        torch.testing.assert_close(weights[name], tensor, atol=1e-5, rtol=0, msg=name)  # NF4 codes: equal
    out = tmp_path / "one_file.ckpt"
    assert consolidate_main([f"ckpt={folder}", f"out={out}"]) == 0
    merged, _ = zoo.load(out)  # adapters merged into the dequantised base: a plain fp32 model
    assert not any(isinstance(m, QLoRALinear) for m in merged.modules())
    assert {v.dtype for v in merged.state_dict().values()} == {torch.float32}
