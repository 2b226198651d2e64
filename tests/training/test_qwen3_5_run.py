"""`python train.py model=qwen3_5_small` (issue 37): the small Qwen3.5-style hybrid preset (Gated DeltaNet
layers before each gated-attention layer) trains from scratch through the command line, shrunk to a few
steps, its loss falling, and its checkpoint exports as a qwen3_5_text folder transformers reads with zoo's
logits."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Qwen3_5ForCausalLM

import zoo

from .conftest import train_losses

pytestmark = pytest.mark.e2e  # a train.py process


def test_qwen3_5_small_trains_from_the_command_line_and_exports(tmp_path, run_cli, cache_dir):
    run_dir = tmp_path / "run"
    proc = run_cli(["model=qwen3_5_small", "model.d_model=64", "model.n_layers=4", "model.head_dim=16",
                    "model.d_ff=128", "model.linear_mixer.linear_key_head_dim=16",
                    "model.linear_mixer.linear_value_head_dim=16", "model.linear_mixer.chunk_size=16",
                    "data=stdlib_text", "data.max_bytes=120000", "tokenizer.vocab_size=300",
                    "model.max_seq_len=32", "batch_size=8", "logger=csv", "trainer.accelerator=cpu",
                    "trainer.max_steps=16", "eval_every=8", "trainer.limit_val_batches=2",
                    "trainer.log_every_n_steps=1", "trainer.num_sanity_val_steps=0",
                    "trainer.enable_progress_bar=false", "callbacks.samples.max_new_tokens=8",
                    "optim.lr=3e-3",
                    "scheduler.warmup_steps=2", f"hydra.run.dir={run_dir}", f"paths.cache_dir={cache_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = train_losses(run_dir)
    assert losses[max(losses)] < losses[0] - 0.5
    model, _ = zoo.load(run_dir / "checkpoints" / "last.ckpt")
    assert model.config.linear_mixer.name == "gated_deltanet"
    out = zoo.save_pretrained(model.eval(), tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3_5_text"
    hf = Qwen3_5ForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4
