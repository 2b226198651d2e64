"""bench/bench_unpadding.py: its packed and unpadded-linears sides compute the padded forward's hidden states
at the real tokens (the section asserts it before timing; here on a tiny model, both padding regimes)."""

from __future__ import annotations

from bench.bench_unpadding import REGIMES, run


def test_quick_run_checks_every_side_and_reports_each_regime():
    section = run(quick=True)
    assert all(regime in section.table for regime in REGIMES)
    assert "packed ms" in section.table and "unpadded linears ms" in section.table
