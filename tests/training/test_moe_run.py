"""ffn=moe through train.py's path: the balancing losses reach the trained loss, the routing is logged
(per-layer expert load, aux and z losses, dropped tokens), the sigmoid_bias router's bias follows the load,
the model learns, and the checkpoint exports and loads with the same logits."""

from __future__ import annotations

import math

import pytest
import torch

import zoo
from zoo.modules.moe import moe_layers
from zoo.training.run import train

from .conftest import TINY_LM, read_csv_metrics, train_losses

MOE = ["model.n_layers=2"]


@pytest.mark.e2e  # 20 steps, ~7 s
def test_moe_lm_trains_logs_its_routing_and_exports(make_cfg, tmp_path):
    cfg = make_cfg([*TINY_LM, *MOE, "trainer.max_steps=20", "eval_every=10",
                    "model.ffn={name: moe, n_experts: 4, top_k: 2, balance: {aux: 0.01, z: 0.001}, "
                    "capacity_factor: 1.0}",
                    "model.layer_pattern=[dense,moe]"])
    result = train(cfg)
    assert result.metrics["val/loss"] < math.log(300) - 0.5  # it learns (a uniform guess: log 300)
    rows = read_csv_metrics(result.output_dir)
    columns = set().union(*(r.keys() for r in rows))
    assert {"train/moe/aux", "train/moe/z", "train/moe/decoder.1/load_0", "train/moe/decoder.1/max_over_mean",
            "train/moe/decoder.1/dropped"} <= columns
    assert "train/moe/decoder.0/load_0" not in columns  # [dense, moe] -> layer 0 is dense
    shares = [float(r[f"train/moe/decoder.1/load_{i}"]) for r in rows[-1:] for i in range(4)
              if r.get("train/moe/decoder.1/load_0")]
    assert not shares or abs(sum(shares) - 1) < 1e-5

    model, _ = zoo.load(result.last_checkpoint)
    exported = zoo.export(result.last_checkpoint, tmp_path / "export")
    again, _ = zoo.load(exported)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    torch.testing.assert_close(again(ids).logits, model(ids).logits, rtol=0, atol=0)
    assert len(moe_layers(again)) == 1


def test_sigmoid_bias_router_bias_moves_during_training(make_cfg):
    cfg = make_cfg([*TINY_LM, *MOE, "trainer.max_steps=4", "eval_every=4",
                    "model.ffn={name: moe, n_experts: 4, top_k: 1, "
                    "router: {name: sigmoid_bias, bias_rate: 0.01}, balance: {}}"])
    result = train(cfg)
    model, _ = zoo.load(result.last_checkpoint)
    biases = [layer.router.bias for _, layer in moe_layers(model)]
    assert len(biases) == 2
    for bias in biases:  # each step moves every expert by +-0.01 or 0: after 4 steps a multiple of 0.01
        assert bias.abs().max() > 0 and torch.allclose(bias * 100, (bias * 100).round(), atol=1e-4)


@pytest.mark.e2e  # two train.py processes
def test_moe_ddp_two_cpu_processes_match_one_process(tmp_path, run_cli, make_cfg, cache_dir):
    """Dropless routing is per token, so two processes with half the batch each train as one with all of it
    (without a balancing loss: that one is computed over each process's own tokens, as Megatron and
    transformers do, so it differs from the whole batch's)."""
    common = ["experiment=smoke", "data.max_bytes=120000", "tokenizer.vocab_size=300", "model.max_seq_len=32",
              "trainer.log_every_n_steps=1", "trainer.num_sanity_val_steps=0", *MOE,
              "model.ffn={name: moe, n_experts: 4, top_k: 2, balance: {}}", "trainer.max_steps=3",
              "eval_every=3",
              "callbacks.samples=null"]
    train(make_cfg([*common, "trainer=cpu", "batch_size=8"], run="one"))
    two = run_cli([*common, "trainer=ddp_cpu", "batch_size=4", f"hydra.run.dir={tmp_path / 'two'}",
                   f"paths.cache_dir={cache_dir}"])
    assert two.returncode == 0, two.stderr[-3000:]
    single, ddp = train_losses(tmp_path / "runs" / "one"), train_losses(tmp_path / "two")
    assert sorted(single) == sorted(ddp) == [0, 1, 2]
    for step in single:
        assert ddp[step] == pytest.approx(single[step], abs=1e-4)
