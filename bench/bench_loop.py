"""train.py against a hand-written loop (issue 42): the same zoo model, data windows, AdamW / warmup-cosine /
clipping recipe and evaluation cadence, each side a fresh process timed by one probe (bench/loop_probe.py):
time to the first optimizer step, median step time, time in evaluation and checkpoints, total wall and the
final validation loss.

The windows are the ones train.py draws: this process plans and opens the run as train.py does
(`zoo.training.run.prepare` / `open_run`, which also warms the data cache) and saves the first `steps`
training batches and the `val_batches` validation batches as tensors, which the minimal loop
(bench/minimal_loop.py) reads. train.py runs with `logger=csv` and `callbacks.samples=null` (the minimal loop
has no W&B run and generates no samples); everything else is its default (progress lines, tokens/s,
non-finite stop, checkpoints, sanity validation)."""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Section, markdown_table

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class LoopShape:
    """One run compared: train.py overrides (the model and batch), steps, evaluation cadence and batches."""

    name: str
    overrides: tuple[str, ...]
    steps: int
    eval_every: int
    val_batches: int | None  # None: the whole validation split (train.py's default)

    def train_args(self, log_dir: Path, steps: int | None = None) -> list[str]:
        steps = steps or self.steps
        limit = [] if self.val_batches is None else [f"trainer.limit_val_batches={self.val_batches}"]
        return [*self.overrides, "logger=csv", "callbacks.samples=null", f"paths.log_dir={log_dir}",
                f"trainer.max_steps={steps}", f"eval_every={min(self.eval_every, steps)}", *limit]


SMALL = ("model.n_layers=4", "model.d_model=128", "model.n_heads=4", "model.max_seq_len=64", "batch_size=12")
# the issue asks 2,000 steps (eval every 250) and gpt_small's default 300 (eval every 100): scaled so that
# 2 sides x 3 repeats fit in minutes on a shared 2-core machine at load average ~10 (6 and 3 validations,
# over 5 and 2 batches; a share of evaluation in the run like the issue's, at fewer steps).
SHAPES = {
    False: [LoopShape("gpt 4x128 (B=12, T=64), 60 steps", SMALL, 60, 10, 5),
            LoopShape("gpt_small default (B=8, T=256), 6 steps", (), 6, 2, 2)],
    True: [LoopShape("gpt 1x32 (quick)", ("model.n_layers=1", "model.d_model=32", "model.n_heads=2",
                                          "model.max_seq_len=32", "batch_size=4"), 8, 4, 2)],
}
# gpt_small's default run as `python train.py` has it (`--default-run`): about 7-10 minutes a side
DEFAULT_RUN = LoopShape("gpt_small default (B=8, T=256), 300 steps", (), 300, 100, None)


def compose(overrides: list[str], output_dir: Path):
    """conf/config.yaml composed as train.py's @hydra.main composes it (HydraConfig set)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from zoo.training.hydra_configs import register_train_configs

    register_train_configs()

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose("config", overrides=[*overrides, f"paths.output_dir={output_dir}"],
                            return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def prepare_minimal(shape: LoopShape, work: Path) -> Path:
    """Plan and open the run as train.py does; save its windows and write the minimal loop's spec."""
    import lightning as L
    import torch

    from zoo.training.run import open_run, prepare

    cfg = compose(shape.train_args(work / "runs"), work / "prepare")
    plan = prepare(cfg)
    L.seed_everything(plan.resolved["seed"], workers=True, verbose=False)
    opened = open_run(plan)
    dm = opened.datamodule
    train, val, loader = [], [], dm.train_dataloader()
    for epoch in range(shape.steps):  # an lm epoch is one evaluation interval; Lightning re-keys each
        loader.sampler.set_epoch(epoch)
        train += [{k: batch[k] for k in ("input_ids", "targets")} for batch in loader]
        if len(train) >= shape.steps:
            break
    train = train[:shape.steps]
    for batch in dm.val_dataloader():
        val.append({k: batch[k] for k in ("input_ids", "targets")})
        if shape.val_batches is not None and len(val) == shape.val_batches:
            break
    torch.save({"train": train, "val": val}, work / "data.pt")
    r = plan.resolved
    spec = {"model": opened.model.config.to_dict(), "data": str(work / "data.pt"),
            "out": str(work / "minimal"),
            "seed": r["seed"], "optim": r["optim"], "warmup_steps": r["scheduler"]["warmup_steps"],
            "min_lr_ratio": r["scheduler"]["min_lr_ratio"], "max_steps": shape.steps,
            "eval_every": shape.eval_every, "clip": r["trainer"]["gradient_clip_val"],
            "log_every": r["trainer"]["log_every_n_steps"]}
    if r["optim"]["name"] != "adamw" or r["scheduler"]["name"] != "cosine":
        raise ValueError("the minimal loop writes AdamW + warmup-cosine by hand; this run uses "
                         f"optim.name={r['optim']['name']} scheduler={r['scheduler']['name']}")
    (work / "spec.json").write_text(json.dumps(spec))
    (work / "warm.spec.json").write_text(json.dumps({**spec, "max_steps": 2, "eval_every": 2}))
    return work / "spec.json"


def bench_env(threads: int = 1) -> dict[str, str]:
    """The sides' environment: bytecode caches on (a user's install has them; this sandbox turns them off),
    `threads` torch threads (1 by default: see the section's notes, a loaded shared machine)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_side(command: list[str], probe_out: Path, threads: int = 1) -> dict[str, Any]:
    """Run one side under the probe; return its timings (seconds, wall and process CPU) and final val/loss."""
    full = [sys.executable, "-m", "bench.loop_probe", str(probe_out), *command]
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    done = subprocess.run(full, cwd=ROOT, env=bench_env(threads), capture_output=True, text=True)
    wall, after = time.time() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
    probe = json.loads(probe_out.read_text())
    found = re.findall(r"val/loss = ([0-9.]+|nan|inf)", done.stdout)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {**timings(probe, t0), "wall": wall, "cpu": cpu,
            "val_loss": float(found[-1]) if found else float("nan")}


def closed(window: list[float], saves: list[list[float]], end: float) -> tuple[float, float]:
    """A window still open when the process ended (the last validation) ends with its last torch.save."""
    start, stop = window
    if stop < end:
        return start, stop
    return start, max([e for s, e in saves if s >= start], default=start)


def split(steps: list[float], windows: list[list[float]], saves: list[list[float]], end: float,
          t0: float) -> dict[str, Any]:
    """First step (from t0), median step, evaluation and save seconds of one clock's record."""
    if not steps:
        raise RuntimeError("the side ran no optimizer step")
    # the sanity check before step 1 is start-up
    windows = [closed(w, saves, end) for w in windows if w[0] >= steps[0]]
    gaps = [b - a for a, b in zip(steps, steps[1:], strict=False) if not any(a <= w[0] < b for w in windows)]
    return {"first_step": steps[0] - t0, "step": statistics.median(gaps) if gaps else float("nan"),
            "evaluation": sum(b - a for a, b in windows), "saving": sum(b - a for a, b in saves),
            "steps": len(steps), "after_last_step": end - steps[-1]}


def timings(probe: dict[str, Any], t0: float) -> dict[str, Any]:
    """`split` on the wall clock (process start t0) and, as cpu_*, on the process's CPU clock (from 0)."""
    wall = split(probe["steps"], probe["windows"], probe["saves"], probe["end"], t0)
    cpu = split(probe["cpu_steps"], probe["cpu_windows"], probe["cpu_saves"], probe["cpu_end"], 0.0)
    return {**wall, **{f"cpu_{key}": cpu[key] for key in ("first_step", "step", "evaluation")}}


def measure_shape(shape: LoopShape, repeats: int, work: Path,
                  threads: int = 1) -> dict[str, list[dict[str, Any]]]:
    """Both sides `repeats` times, alternating which goes first, after one short untimed run of each."""
    spec = prepare_minimal(shape, work)
    sides = {
        "train.py": lambda i, steps=None: ["train.py", *shape.train_args(work / f"runs{i}", steps)],
        "minimal loop": lambda i, steps=None: ["bench/minimal_loop.py",
                                               str(spec.with_name("warm.spec.json") if steps else spec)],
    }
    for name in sides:  # 2 untimed steps of each side: bytecode and page caches warm
        run_side(sides[name](0, 2), work / "warm.json", threads)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(repeats):
        for name in names[r % 2:] + names[:r % 2]:
            results[name].append(run_side(sides[name](r + 1), work / f"{r}.json", threads))
            print(f"[loop] {shape.name} {name} #{r + 1}: {results[name][-1]}", file=sys.stderr, flush=True)
    return results


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def section(rows: list[tuple[LoopShape, dict[str, list[dict[str, Any]]]]], load: list[float],
            scaled: bool = True, threads: int = 1) -> Section:
    headers = ["run", "side", "first step, wall / CPU (s)", "median step, wall / CPU (ms)",
               "evaluation + checkpoints, wall / CPU (s)", "of which torch.save (s)", "total, wall / CPU (s)",
               "final val loss"]
    table, goals, notes = [], [], []
    for shape, results in rows:
        for side, runs in results.items():
            med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
            table.append([shape.name, side, f"{med['first_step']:.2f} / {med['cpu_first_step']:.2f}",
                          f"{1000 * med['step']:.1f} / {1000 * med['cpu_step']:.1f}",
                          f"{med['evaluation']:.2f} / {med['cpu_evaluation']:.2f}", f"{med['saving']:.2f}",
                          f"{med['wall']:.1f} / {med['cpu']:.1f}",
                          " / ".join(f"{run['val_loss']:.4f}" for run in runs)])
        zoo_runs, bare = results["train.py"], results["minimal loop"]
        ratios = {key: [z[key] / b[key] for z, b in zip(zoo_runs, bare, strict=True)]
                  for key in ("wall", "step", "first_step", "evaluation", "cpu", "cpu_step", "cpu_first_step",
                              "cpu_evaluation")}
        length = "" if f"{shape.steps} steps" in shape.name else f", {shape.steps} steps"
        over = "the whole split" if shape.val_batches is None else f"{shape.val_batches} batches"
        notes.append(f"{shape.name}{length}, validation every {shape.eval_every} over "
                     f"{over}: train.py / minimal loop, median (min-max) of "
                     f"{len(zoo_runs)} paired repeats, wall (process CPU): total {_spread(ratios['wall'])} "
                     f"({_spread(ratios['cpu'])}), median step {_spread(ratios['step'])} "
                     f"({_spread(ratios['cpu_step'])}), first step {_spread(ratios['first_step'])} "
                     f"({_spread(ratios['cpu_first_step'])}), evaluation + checkpoints "
                     f"{_spread(ratios['evaluation'])} ({_spread(ratios['cpu_evaluation'])}). CPU seconds "
                     "train.py spends beyond the minimal loop: "
                     + ", ".join(f"{name} {_extra(zoo_runs, bare, key):+.2f}"
                                 for name, key in (("to the first step", "cpu_first_step"),
                                                   ("in evaluation + checkpoints", "cpu_evaluation"),
                                                   ("in all", "cpu")))
                     + f", of which in the steps {_steps_cpu(zoo_runs, bare):+.2f} and after the last step "
                     f"and validation (summary, exit) {_rest_cpu(zoo_runs, bare):+.2f}.")
        for clock, key in (("wall", "wall"), ("CPU", "cpu")):
            ratio = statistics.median(b[key] / z[key] for z, b in zip(zoo_runs, bare, strict=True))
            goals.append((f"loop {shape.name}: minimal loop {clock} / train.py {clock}", ratio, 1.0))
    notes.append(f"Load average (1 min) before / after the section: {load[0]:.1f} / {load[1]:.1f} on "
                 f"{os.cpu_count()} cores (other engineers' tests share the machine): wall-clock grows "
                 "with the neighbours' load, a process's CPU time much less; only ratios of sides measured "
                 "side by side in one run count.")
    scaling = ("Step counts are scaled far down from the issue's (2,000 steps, evaluation every 250; "
               "gpt_small's 300, evaluation every 100) so that 2 sides x 3 repeats fit on the shared "
               "2-core machine: at these sizes start-up weighs much more in the wall time than "
               "in the issue's runs. ") if scaled else ""
    why = (" (two torch threads on a machine with ~10 runnable processes spin in OpenMP barriers: 1.5 s of "
           "CPU per small step)") if threads == 1 else " (a quiet machine)"
    notes.append(f"{scaling}Both sides run with OMP_NUM_THREADS={threads}{why}. Each "
                 "side is a fresh process (bytecode caches warm, 2 untimed steps of each first); the time to "
                 "the first step counts from process start, data cache warm. The sanity validation train.py "
                 "runs before step 1 is in its first-step time. CPU columns: the process's CPU time "
                 "(time.process_time at the probe's marks; total: the child's rusage).")
    return Section("Training loop: train.py vs a minimal loop", markdown_table(headers, table), notes,
                   goals=goals)


def _extra(zoo_runs: list[dict[str, Any]], bare: list[dict[str, Any]], key: str) -> float:
    """Median over paired repeats of train.py's `key` minus the minimal loop's."""
    return statistics.median(z[key] - b[key] for z, b in zip(zoo_runs, bare, strict=True))


def _rest_cpu(zoo_runs: list[dict[str, Any]], bare: list[dict[str, Any]]) -> float:
    """Median over paired repeats of the extra CPU seconds that neither start-up, the steps nor evaluation
    hold (the summary, interpreter exit)."""

    def rest(run: dict[str, Any]) -> float:
        steps = run["cpu_step"] * (run["steps"] - 1)
        return run["cpu"] - run["cpu_first_step"] - run["cpu_evaluation"] - steps

    return statistics.median(rest(z) - rest(b) for z, b in zip(zoo_runs, bare, strict=True))


def _steps_cpu(zoo_runs: list[dict[str, Any]], bare: list[dict[str, Any]]) -> float:
    """Median over paired repeats of (train.py - minimal loop) CPU seconds in the steps after the first:
    the median step's difference times the steps."""
    return statistics.median((z["cpu_step"] - b["cpu_step"]) * (z["steps"] - 1)
                             for z, b in zip(zoo_runs, bare, strict=True))


def run(quick: bool = False, shapes: list[LoopShape] | None = None, threads: int = 1) -> Section:
    """The section at its scaled-down shapes (SHAPES), or at `shapes` (e.g. the issue's own step counts), each
    side with `threads` torch threads."""
    repeats = 1 if quick else int(os.environ.get("ZOO_BENCH_LOOP_REPEATS", "3"))
    load = [os.getloadavg()[0]]
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoo-bench-loop-") as tmp:
        for i, shape in enumerate(shapes or SHAPES[quick]):
            work = Path(tmp) / str(i)
            work.mkdir()
            rows.append((shape, measure_shape(shape, repeats, work, threads)))
    load.append(os.getloadavg()[0])
    return section(rows, load, scaled=shapes is None, threads=threads)


def main(argv: list[str]) -> None:
    """`python -m bench.bench_loop [--quick]`: the section, printed (not stored); `--steps N
    [--eval-every M] [--val-batches K]`: the gpt 4x128 shape at N steps instead (the issue's: --steps 2000
    --eval-every 250); `--default-run`: gpt_small's default run unscaled (300 steps, validation every 100 over
    the whole split); `--threads T`: torch threads per side (1 by default, for a loaded machine)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.bench_loop")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, help="the gpt 4x128 (B=12, T=64) shape at this many steps")
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--val-batches", type=int, default=5)
    parser.add_argument("--default-run", action="store_true", help="gpt_small's default run, unscaled")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per side")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: at least 1")
    if args.default_run and (args.steps is not None or args.quick):
        parser.error("--default-run is gpt_small's default run as train.py has it: not with --steps, --quick")
    shapes = [DEFAULT_RUN] if args.default_run else None
    if args.steps is not None:
        if args.steps < 2 or args.eval_every < 1 or args.val_batches < 1:
            parser.error(f"--steps {args.steps} --eval-every {args.eval_every} --val-batches "
                         f"{args.val_batches}: steps >= 2, eval-every and val-batches >= 1")
        shapes = [LoopShape(f"gpt 4x128 (B=12, T=64), {args.steps} steps", SMALL, args.steps, args.eval_every,
                            args.val_batches)]
    print(run(args.quick, shapes, args.threads).markdown())

if __name__ == "__main__":
    main(sys.argv[1:])
