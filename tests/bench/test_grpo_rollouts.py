"""bench/bench_grpo_rollouts.py: the eos bias makes eos as likely per token as asked (a closed form on a
model whose other logits are 0), and at --quick size (e2e) every decoding path runs, the generate paths
giving the dynamic cache's tokens for one seed and every side counting the tokens it produced."""

from __future__ import annotations

import math

import pytest
import torch

import zoo
from bench.bench_grpo_rollouts import GENERATE, run, with_eos_bias


def test_the_eos_bias_gives_eos_the_asked_chance_when_the_other_logits_are_zero():
    torch.manual_seed(0)
    model = with_eos_bias(zoo.build("gpt_nano", d_model=16, n_heads=2, n_layers=1), 0.1).eval()
    with torch.no_grad():
        model.head.proj.weight.zero_()  # every logit 0 but the bias
        probs = model(input_ids=torch.tensor([[5, 6, 7]])).logits[0, -1].softmax(-1)
    assert float(probs[model.config.eos_id]) == pytest.approx(0.1, rel=1e-5)
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-5)


@pytest.mark.e2e  # compiles the static step of two models: ~40 s
def test_quick_run_times_every_path_and_the_generate_paths_give_the_same_tokens():
    rows = run(quick=True).data["rows"]
    assert {r["side"] for r in rows} == {*GENERATE, "engine"}
    assert all(r["same_tokens_as_dynamic"] for r in rows if r["side"] in GENERATE)
    assert all(r["tokens_per_s"] > 0 and 1 <= r["mean_length"] <= r["budget"] for r in rows)
