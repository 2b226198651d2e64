"""finetune=qlora through train.py: the checkpoint holds the adapters and the 4-bit base itself (two NF4 codes
a byte and the block absmaxes, no float copy), a resume continues from it, and export merges into an fp32
model whose logits equal the dequantised base plus the adapters."""

from __future__ import annotations

from importlib.util import find_spec

import pytest
import torch

import zoo
from zoo.checkpoint import Checkpoint, model_state, restore_adapters
from zoo.config import ModelConfig
from zoo.modules.qlora import QLoRALinear
from zoo.presets import build
from zoo.training.run import train

from .conftest import FAST

# found, not imported: collecting this file (every xdist worker does) does not pay bitsandbytes' import
NEEDS_BITSANDBYTES = pytest.mark.skipif(find_spec("bitsandbytes") is None,
                                        reason="the qlora extra (pip install 'zoo[qlora]')")
pytestmark = [pytest.mark.e2e, NEEDS_BITSANDBYTES]  # e2e: trains twice and exports, outside the inner loop

QLORA = ["finetune=qlora", "finetune.block_size=32", "finetune.rank=4"]


def run(make_run_cfg, corpus, steps: int, *extra: str, name: str):
    return train(make_run_cfg(["model=gpt_nano", "model.max_seq_len=32", "tokenizer=char", "data=text",
                               f"data.files={corpus}", *FAST, f"trainer.max_steps={steps}", "eval_every=2",
                               "optim.lr=1e-2", *QLORA, *extra], run=name))


def unmerged(ckpt: Checkpoint) -> torch.nn.Module:
    """The QLoRA model as the checkpoint holds it (NF4 base, adapters not merged)."""
    model = build(ModelConfig.from_dict(ckpt.record.model_config))
    restore_adapters(model, ckpt.record, ckpt.path)
    model.load_state_dict(model_state(ckpt.data["state_dict"]))
    return model.eval()


def test_checkpoint_holds_the_nf4_base_resumes_and_exports_fp32(make_run_cfg, folders, tmp_path):
    first = run(make_run_cfg, folders["corpus"], 2, name="first")
    ckpt = Checkpoint.read(first.last_checkpoint)
    state = model_state(ckpt.data["state_dict"])
    layer = "decoder_stack.layers.0.self_attn.qkv"
    assert state[f"{layer}.weight_nf4"].dtype == torch.uint8 and f"{layer}.weight" not in state
    assert state[f"{layer}.weight_nf4"].numel() == 96 * 32 // 2  # the 4-bit base, no float copy
    assert ckpt.record.lora["quantized"] == "nf4" and ckpt.record.lora["block_size"] == 32
    assert state[f"{layer}.lora_B"].abs().max() > 0  # the adapters trained

    resumed = run(make_run_cfg, folders["corpus"], 4, f"ckpt_path={first.last_checkpoint}", name="resumed")
    later = Checkpoint.read(resumed.last_checkpoint)
    after = model_state(later.data["state_dict"])
    assert torch.equal(after[f"{layer}.weight_nf4"], state[f"{layer}.weight_nf4"])  # the base stays frozen
    assert not torch.equal(after[f"{layer}.lora_B"], state[f"{layer}.lora_B"])  # training went on
    assert later.data["global_step"] == 4

    quantized = unmerged(later)
    assert isinstance(quantized.get_submodule(layer), QLoRALinear)
    out = zoo.export(resumed.last_checkpoint, tmp_path / "export")
    merged, tokenizer = zoo.load(out)
    assert not any(isinstance(m, QLoRALinear) for m in merged.modules())
    assert {v.dtype for v in merged.state_dict().values()} == {torch.float32}
    ids = torch.tensor([tokenizer.encode("def add(a, b):\n    return a + b\n")])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, quantized(ids).logits, atol=1e-4, rtol=0)
