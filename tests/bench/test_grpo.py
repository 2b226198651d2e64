"""bench/bench_grpo.py: the whole base -> SFT -> GRPO pipeline runs at --quick size (e2e): accuracies are
shares, the reward curve has one row per GRPO step with rollout time on the steps that sampled, and the
summary table reads them."""

from __future__ import annotations

import pytest

from bench.bench_grpo import SIZES, measure, summary


@pytest.mark.e2e  # three train.py runs at the smallest size: ~15 s
def test_quick_pipeline_runs_and_reports_a_reward_curve():
    results = measure([0], quick=True)
    r = results[0]
    assert 0.0 <= r["sft"] <= 1.0 and 0.0 <= r["grpo"] <= 1.0 and r["held_out"] == 7
    assert [c[0] for c in r["curve"]] == list(range(SIZES[True]["grpo_steps"]))
    assert all(0.0 <= c[1] <= 1.0 and c[2] > 0 for c in r["curve"])  # answer_match; every step sampled
    assert summary(results).splitlines()[2].startswith("| 0 | ")
