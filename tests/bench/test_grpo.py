"""bench/bench_grpo.py: the biased SFT rows are what the demo says they are (the sum in the given share, else
the sum + 1); the whole base -> SFT -> GRPO pipeline runs at --quick size (e2e): accuracies are shares, the
reward curve has one row per GRPO step with rollout time on the steps that sampled, and the summary table
reads them."""

from __future__ import annotations

import pytest

from bench.bench_grpo import SFT_DATA, SIZES, measure, summary
from bench.bench_post_training import chat_rows


def replies(rows: list[dict]) -> list[tuple[int, int]]:
    """(asked sum, replied number) of each chat row."""
    out = []
    for row in rows:
        a, b = row["messages"][0]["content"].rstrip("=").split("+")
        out.append((int(a) + int(b), int(row["messages"][1]["content"])))
    return out


def test_biased_rows_reply_the_sum_in_the_given_share_and_the_sum_plus_one_otherwise():
    combos = [(a, b) for a in range(20) for b in range(20)]
    rows = chat_rows(combos, seed=0, **SFT_DATA["biased"])
    pairs = replies(rows)
    assert len(rows) == len(combos) * SFT_DATA["biased"]["copies"]
    assert all(got in (asked, asked + 1) for asked, got in pairs)
    right = sum(got == asked for asked, got in pairs) / len(pairs)
    assert abs(right - SFT_DATA["biased"]["right_share"]) < 0.05
    assert chat_rows(combos, seed=0, **SFT_DATA["biased"]) == rows  # seeded
    assert all(got == asked for asked, got in replies(chat_rows(combos, seed=0, **SFT_DATA["clean"])))


@pytest.mark.e2e  # three train.py runs at the smallest size: ~15 s
def test_quick_pipeline_runs_and_reports_a_reward_curve():
    results = measure([0], quick=True)
    r = results[0]
    assert r["held_out"] == 7
    assert all(0.0 <= r[stage][kind] <= 1.0 for stage in ("sft", "grpo") for kind in ("greedy", "sampled"))
    assert [c["step"] for c in r["curve"]] == list(range(SIZES[True]["grpo_steps"]))
    assert all(0.0 <= c["reward"] <= 1.0 and c["generation_s"] > 0 for c in r["curve"])  # every step sampled
    assert all(c["update_s"] > 0 for c in r["curve"][1:])  # step 0 has no update before it
    assert summary(results).splitlines()[2].startswith("| 0 | ")
