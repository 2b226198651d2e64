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

from .conftest import TINY_LM, read_csv_metrics

MOE = ["model.ffn=moe", "model.n_layers=2"]


@pytest.mark.e2e  # 20 steps, ~7 s
def test_moe_lm_trains_logs_its_routing_and_exports(make_cfg, tmp_path):
    cfg = make_cfg([*TINY_LM, *MOE, "trainer.max_steps=20", "eval_every=10",
                    "+model.moe={n_experts: 4, top_k: 2, balance: [aux, z], capacity_factor: 1.0, every: 2}"])
    result = train(cfg)
    assert result.metrics["val/loss"] < math.log(300) - 0.5  # it learns (a uniform guess: log 300)
    rows = read_csv_metrics(result.output_dir)
    columns = set().union(*(r.keys() for r in rows))
    assert {"train/moe/aux", "train/moe/z", "train/moe/decoder.1/load_0", "train/moe/decoder.1/max_over_mean",
            "train/moe/decoder.1/dropped"} <= columns
    assert "train/moe/decoder.0/load_0" not in columns  # every: 2 -> layer 0 is dense
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
                    "+model.moe={n_experts: 4, top_k: 1, router: sigmoid_bias, bias_rate: 0.01, "
                    "balance: none}"])
    result = train(cfg)
    model, _ = zoo.load(result.last_checkpoint)
    biases = [layer.router.bias for _, layer in moe_layers(model)]
    assert len(biases) == 2
    for bias in biases:  # each step moves every expert by +-0.01 or 0: after 4 steps a multiple of 0.01
        assert bias.abs().max() > 0 and torch.allclose(bias * 100, (bias * 100).round(), atol=1e-4)
