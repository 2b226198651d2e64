"""bench/gpu.py's CPU-side logic (the script itself needs a GPU and was not run here): the plan runs end to
end on CPU with a tiny model (compiled sides left out to keep it fast), the peak lookup, and the section's
rows."""

from __future__ import annotations

import pytest

from bench.gpu import PEAK_BF16, Plan, measure, peak_flops, run, section


def test_peak_lookup_prefers_the_longest_name():
    assert peak_flops("NVIDIA H200") == PEAK_BF16["H200"] == 989e12
    assert peak_flops("NVIDIA GeForce RTX 4090") == PEAK_BF16["RTX 4090"]
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12 and peak_flops("Some CPU") is None


def test_the_plan_runs_on_cpu_and_fills_every_row():
    plan = Plan.dry_run(compile=False)
    result = measure(plan)
    assert set(result["tokens_per_s"]) == {"32-true", "bf16-mixed"}
    assert all(v > 0 for v in result["tokens_per_s"].values())
    assert set(result["sdpa"]) == {"FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"}
    assert result["sdpa"]["MATH"].startswith("runs")  # the math backend runs everywhere
    assert set(result["generation_tok_s"]) == {"dynamic cache", "static cache"}
    result["peak"] = PEAK_BF16["H200"]  # as on the card: the MFU column is computed
    md = section(plan, result).markdown()
    assert "| 32-true |" in md and "| bf16-mixed |" in md and "peak unknown" not in md and "989 TFLOP/s" in md
    assert set(Plan.gpu().training_sides) == set(Plan.gpu().sides) and Plan.gpu().preset == "gpt2"


def test_the_section_refuses_to_run_without_a_gpu(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        run()
