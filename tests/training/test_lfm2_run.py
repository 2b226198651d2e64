"""`python train.py model=lfm2_small` (issue 37): the small LFM2-style hybrid preset (short_conv layers beside
attention) trains from scratch through the command line, shrunk to a few steps, its loss falling, and its
checkpoint exports as an lfm2 folder transformers reads with zoo's logits."""

from __future__ import annotations

import pytest
import torch
from transformers import Lfm2ForCausalLM

import zoo

from .conftest import train_losses

pytestmark = pytest.mark.e2e  # a train.py process


def test_lfm2_small_trains_from_the_command_line_and_exports(tmp_path, run_cli, cache_dir):
    run_dir = tmp_path / "run"
    proc = run_cli(["model=lfm2_small", "model.d_model=64", "model.n_heads=4", "model.d_ff=128",
                    "data=stdlib_text", "data.max_bytes=120000", "tokenizer.vocab_size=300",
                    "model.max_seq_len=32", "batch_size=8", "logger=csv", "trainer.accelerator=cpu",
                    "trainer.max_steps=16", "eval_every=8", "trainer.limit_val_batches=2",
                    "trainer.log_every_n_steps=1", "trainer.num_sanity_val_steps=0",
                    "trainer.enable_progress_bar=false", "callbacks.samples.max_new_tokens=8",
                    "optim.lr=3e-3", "scheduler.warmup_steps=2", f"hydra.run.dir={run_dir}",
                    f"paths.cache_dir={cache_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = train_losses(run_dir)
    assert losses[max(losses)] < losses[0] - 0.5
    model, _ = zoo.load(run_dir / "checkpoints" / "last.ckpt")
    assert model.config.linear_mixer.name == "short_conv"
    hf = Lfm2ForCausalLM.from_pretrained(zoo.save_pretrained(model.eval(), tmp_path / "hf")).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4
