"""bench/bench_post_training.py: the held-out combinations are out of every stage, and the whole base -> SFT
-> DPO pipeline runs at --quick size (e2e), every measured share in [0, 1]."""

from __future__ import annotations

import pytest

from bench.bench_post_training import answer, combos, measure, section


def test_held_out_combinations_are_a_seeded_fifth_apart_from_training():
    train, held = combos(10, seed=3)
    assert len(held) == 20 and len(train) == 80 and not set(train) & set(held)
    assert combos(10, seed=3) == (train, held) and combos(10, seed=4)[1] != held
    assert (answer(" 12<eos>"), answer("x1"), answer("-3")) == (12, None, -3)


@pytest.mark.e2e  # three train.py runs, sampling and evaluate.py at the smallest size: ~30 s
def test_quick_pipeline_runs_and_reports_shares():
    results = measure([0], quick=True)
    shares = ("base_chat", "base_text", "sft", "dpo", "rpo", "pref_sft", "pref_dpo", "pref_rpo",
              "dpo_reward_accuracy", "rpo_val_reward_accuracy")
    assert all(0.0 <= results[0][k] <= 1.0 for k in shares)
    assert results[0]["held_out"] == 7 and results[0]["train_pairs"] > 0
    assert "Base -> SFT -> DPO" in section(results, quick=True).markdown()
