"""bench/bench_loop.py reads a probe's record (bench/loop_probe.py) into the section's columns: hand-worked
records, and the probe itself on a three-step loop in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_loop import ROOT, timings

# start 100.0; steps at 110, 111, 112 | validation 112.5-114 | steps 114.2, 115.2; the last validation
# (115.5) still open at the end (130), its checkpoint written 116-117
RECORD = {"steps": [110.0, 111.0, 112.0, 114.2, 115.2],
          "windows": [[105.0, 106.0], [112.5, 114.0], [115.5, 130.0]],
          "saves": [[113.0, 113.5], [116.0, 117.0]], "end": 130.0,
          # the same marks on the process's CPU clock (from process start): steps 0.5 s apart, then 0.4
          "cpu_steps": [5.0, 5.5, 6.0, 7.0, 7.4], "cpu_windows": [[2.0, 2.5], [6.2, 6.8], [7.6, 9.0]],
          "cpu_saves": [[6.4, 6.5], [7.8, 8.2]], "cpu_end": 9.0}


def test_timings_split_steps_evaluation_and_saves():
    t = timings(RECORD, 100.0)
    assert t["first_step"] == pytest.approx(10.0)
    assert t["step"] == pytest.approx(1.0)  # the 112 -> 114.2 gap holds a validation: not a step time
    # the sanity window (105-106, before step 1) is start-up; the open last window ends at its last save
    assert t["evaluation"] == pytest.approx(1.5 + 1.5)
    assert t["saving"] == pytest.approx(0.5 + 1.0)
    assert t["steps"] == 5
    # the CPU clock split alike, from 0: the 6.0 -> 7.0 gap holds a validation, the open window ends at 8.2
    assert t["cpu_first_step"] == pytest.approx(5.0)
    assert t["cpu_step"] == pytest.approx(0.5)
    assert t["cpu_evaluation"] == pytest.approx(0.6 + 0.6)


def test_a_side_without_steps_is_an_error():
    with pytest.raises(RuntimeError, match="no optimizer step"):
        timings({**RECORD, "steps": []}, 100.0)


def test_probe_records_steps_windows_and_saves(tmp_path: Path):
    script = tmp_path / "loop.py"
    saved = tmp_path / "m.pt"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(2, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for step in range(3):\n"
        "    m(torch.ones(1, 2)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "    if step == 1:\n"
        f"        m.eval(); m(torch.ones(1, 2)); torch.save(m.state_dict(), {str(saved)!r}); m.train()\n")
    out = tmp_path / "probe.json"
    subprocess.run([sys.executable, "-m", "bench.loop_probe", str(out), str(script)], cwd=ROOT, check=True)
    record = json.loads(out.read_text())
    assert len(record["steps"]) == 3 and len(record["saves"]) == 1
    assert len(record["cpu_steps"]) == 3 and len(record["cpu_saves"]) == 1 and len(record["cpu_windows"]) == 1
    assert 0 < record["cpu_steps"][0] <= record["cpu_steps"][-1] <= record["cpu_end"]
    (start, end), = record["windows"]  # eval() after step 2, closed by step 3's training forward
    assert record["steps"][1] < start <= record["saves"][0][0] <= end <= record["steps"][2]


def test_steps_on_the_command_line_run_the_4x128_shape_at_that_length(monkeypatch, capsys):
    """`python -m bench.bench_loop --steps 2000 --eval-every 250`: the issue's own shape, unscaled; a step
    count below 2 is refused by name before anything runs."""
    import bench.bench_loop as loop

    asked = []

    def run(quick, shapes, threads):
        asked.append((quick, shapes))
        return loop.Section("t", "x")

    monkeypatch.setattr(loop, "run", run)
    loop.main(["--steps", "2000", "--eval-every", "250"])
    [(quick, [shape])] = asked
    assert not quick and (shape.steps, shape.eval_every, shape.val_batches) == (2000, 250, 5)
    assert shape.overrides == loop.SMALL and shape.train_args(Path("l"))[-3:] == [
        "trainer.max_steps=2000", "eval_every=250", "trainer.limit_val_batches=5"]
    with pytest.raises(SystemExit):
        loop.main(["--steps", "1"])
    assert "--steps 1 --eval-every 250 --val-batches 5: steps >= 2" in capsys.readouterr().err
    assert len(asked) == 1


def test_default_run_is_gpt_small_unscaled_over_the_whole_validation_split(monkeypatch, capsys):
    """`--default-run --threads 2`: gpt_small's default run as `python train.py` has it (300 steps, validation
    every 100, no limit on validation batches), each side with 2 torch threads; a thread count below 1 and
    --default-run with --steps are refused by name before anything runs."""
    import bench.bench_loop as loop

    asked = []

    def run(quick, shapes, threads):
        asked.append((quick, shapes, threads))
        return loop.Section("t", "x")

    monkeypatch.setattr(loop, "run", run)
    loop.main(["--default-run", "--threads", "2"])
    [(quick, [shape], threads)] = asked
    assert not quick and threads == 2 and shape.overrides == ()
    args = shape.train_args(Path("l"))
    assert args[-2:] == ["trainer.max_steps=300", "eval_every=100"]
    assert not any(a.startswith("trainer.limit_val_batches") for a in args)
    assert loop.bench_env(2)["OMP_NUM_THREADS"] == "2" and loop.bench_env()["OMP_NUM_THREADS"] == "1"
    together = "--default-run is gpt_small's default run as train.py has it: not with --steps, --quick"
    for bad, said in ((["--threads", "0"], "--threads 0: at least 1"),
                      (["--default-run", "--steps", "50"], together)):
        with pytest.raises(SystemExit):
            loop.main(bad)
        assert said in capsys.readouterr().err
    assert len(asked) == 1
