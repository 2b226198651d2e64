"""The benchmark runner must not rot: its --quick path runs end to end on tiny sizes and writes a document
with every part. Nothing here asserts on speed (speed lives in the tables, as ratios)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import bench.common
import bench.lightning_path
from bench.common import SelfTimed, interleaved
from bench.external import generation_rows
from bench.references import hf_like, parameter_count
from bench.run import main
from zoo.config import ModelConfig


def test_interleaved_rotates_sides_and_uses_self_timed(monkeypatch):
    clock = [0.0]  # a fake perf_counter: only side "a" moves it, by 0.25 s more on each call
    monkeypatch.setattr(bench.common, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    calls: list[str] = []

    def side_a():
        calls.append("a")
        clock[0] += 0.25 * calls.count("a")

    sides = {"a": side_a, "b": lambda: calls.append("b") or SelfTimed(123.0)}
    timings = interleaved(sides, warmup=1, repeats=3)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then A B / B A / A B
    assert timings["b"].seconds == [123.0, 123.0, 123.0]  # a self-timed side reports its own seconds
    assert timings["a"].seconds == [0.5, 0.75, 1.0]  # calls 2-4 (the warm-up call is not timed)


def test_interleaved_rejects_bad_counts():
    with pytest.raises(ValueError, match="repeats"):
        interleaved({"a": lambda: None}, repeats=0)


@pytest.mark.parametrize(
    "cfg",
    [
        dict(arch="decoder", vocab_size=64, d_model=32, n_layers=1, n_heads=2, max_seq_len=16,
             activation="gelu"),
        dict(arch="encoder_decoder", vocab_size=64, d_model=32, n_layers=1, n_heads=2, d_ff=64,
             max_seq_len=16, activation="relu", norm_placement="post", positional="sinusoidal",
             embed_scale=True),
    ],
)
def test_hf_reference_has_the_zoo_shape(cfg):
    import zoo

    model = zoo.build(cfg)
    hf = hf_like(ModelConfig.from_dict(cfg))
    assert parameter_count(hf) == parameter_count(model)
    assert hf.config._attn_implementation == "sdpa"


def test_hf_reference_rejects_a_layout_it_cannot_match():
    with pytest.raises(ValueError, match="pre-LN"):
        hf_like(ModelConfig(arch="decoder", norm_placement="post"))


def test_generation_table_is_parsed():
    out = "shape: ...\n\n| case | zoo tok/s | HF tok/s | zoo / HF |\n|---|---:|---:|---:|\n" \
          "| b1 cache | 61.5 | 50.0 | 1.23x |\n| b1 beam 4 | 10.0 | 20.0 | 0.50x |\n\nbatch 1: ..."
    assert generation_rows(out) == {"b1 cache": (61.5, 50.0), "b1 beam 4": (10.0, 20.0)}


def test_lightning_and_bare_sides_train(monkeypatch):
    from bench.bench_training import SHAPES, training_sides

    sides = training_sides(SHAPES[True][0], steps=2)
    assert list(sides) == ["zoo Lightning", "zoo bare", "HF bare"]
    reads: list[str] = []  # the step clock's own reads of a fake perf_counter, which ticks 1 s per read

    def fake_perf_counter() -> float:
        reads.append("read")
        return float(len(reads))

    monkeypatch.setattr(bench.lightning_path, "time", SimpleNamespace(perf_counter=fake_perf_counter))
    timed = sides["zoo Lightning"]()
    # 3 batches (1 untimed + 2): end of batch 0 (read 1), start of batch 1 (read 2: the window opens), end of
    # batch 1 (read 3), end of batch 2 (read 4: it closes) -> 4 - 2 seconds
    assert isinstance(timed, SelfTimed) and len(reads) == 4 and timed.seconds == 2.0
    assert math.isfinite(sides["zoo bare"]()) and math.isfinite(sides["HF bare"]())


def test_quick_run_writes_document(tmp_path, capsys):
    torch.manual_seed(0)
    out = tmp_path / "bench.md"
    assert main(["--quick", "--sections", "attention", "mfu", "--out", str(out)]) == 0
    text = out.read_text()
    for part in ("## Machine", "## Method", "## Goals", "## Attention", "## Model FLOP utilisation", "## GPU",
                 "not measured", "--quick run"):
        assert part in text, part
    assert "| 32 | forward |" in text  # the quick attention size, one row per (T, pass)
    assert "| MFU |" in text
    assert "## Attention" in capsys.readouterr().out  # tables are printed as well


def test_unknown_section_is_rejected():
    with pytest.raises(SystemExit):
        main(["--quick", "--sections", "nope"])


def test_one_section_rerun_keeps_the_others(tmp_path, monkeypatch):
    import bench.run as runner
    from bench.common import Section

    calls = {"n": 0}

    def good(quick):
        calls["n"] += 1
        return Section("Good", f"| run |\n|---|\n| run-{calls['n']} |", goals=[("good ratio", 1.5, 1.0)])

    def broken(quick):
        raise RuntimeError("boom")

    sections = {"one": good, "two": lambda quick: Section("Two", "| t |\n|---|\n| x |")}
    monkeypatch.setattr(runner, "SECTIONS", sections)
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "DOC", tmp_path / "benchmarks.md")
    monkeypatch.setattr(runner.store, "__defaults__", (tmp_path / "results",))
    monkeypatch.setattr(runner.stored_results, "__defaults__", (tmp_path / "results",))
    assert runner.main([]) == 0
    first = (tmp_path / "benchmarks.md").read_text()
    assert "## Good" in first and "## Two" in first and "run-1" in first and "good ratio | 1.50" in first
    sections["one"] = good
    assert runner.main(["--sections", "one"]) == 0  # re-measure one section: the other keeps its result
    second = (tmp_path / "benchmarks.md").read_text()
    assert "run-2" in second and "run-1" not in second and "## Two" in second
    sections["one"] = broken
    assert runner.main(["--sections", "one"]) == 1  # a failed run never replaces the last good result
    assert (tmp_path / "benchmarks.md").read_text().count("run-2") == 1
    (tmp_path / "benchmarks.md").unlink()
    assert runner.main(["--render"]) == 0 and "## Two" in (tmp_path / "benchmarks.md").read_text()
