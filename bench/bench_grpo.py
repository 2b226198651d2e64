"""Base -> SFT -> GRPO, measured (issue 39): the synthetic `a+b=` task of bench_post_training (a small decoder
pretrained here on text, chat-SFT'd until it is partly right), then task=grpo from the SFT checkpoint on the
training prompts with answer_match as the only reward, through train.py's own runs (`train(cfg)`), for
several seeds.

Measured on the held-out fifth of the (a, b) combinations (held out of every stage): greedy answer accuracy
of the SFT model and of the GRPO model; and the GRPO run's own curve (train/reward per step, the mean of its
sampled completions' rewards), rollout vs update time per step.

    python -m bench.bench_grpo --seeds 0 1 2 --out results.json
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_post_training import COMMON, accuracy, base_then_sft, run, user, write_jsonl

SIZES = {  # quick: checks the pipeline in a minute, measures nothing
    False: dict(n=20, base_steps=600, sft_steps=300, grpo_steps=120, d_model=64, layers=2),
    True: dict(n=6, base_steps=10, sft_steps=10, grpo_steps=4, d_model=32, layers=1),
}
GRPO = ["grpo.rewards=[answer_match]", "grpo.num_generations=8", "grpo.max_completion_length=4",
        "grpo.temperature=1.0", "batch_size=8", "scheduler.warmup_steps=5"]


def curve(run_dir: Path) -> list[tuple[int, float, float, float]]:
    """(step, train/reward, time/generation_s, time/step_s) of each logged training step."""
    with open(run_dir / "csv" / "metrics.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/reward")]
    return [(int(r["step"]), float(r["train/reward"]), float(r["train/time/generation_s"]),
             float(r.get("train/time/step_s") or "nan")) for r in rows]


def one_seed(seed: int, size: dict, work: Path, lr: float = 3e-4) -> dict:
    import zoo

    train_combos, held, _, sft, started = base_then_sft(seed, size, work)
    prompts = write_jsonl(work / "prompts.jsonl", [{"prompt": user(a, b), "answer": str(a + b)}
                                                   for a, b in train_combos])
    sft_done = time.perf_counter()
    tuned = run([*COMMON, f"seed={seed}", "task=grpo", f"init_from={sft.last_checkpoint}", "data=prompts",
                 f"data.path={prompts}", *GRPO, f"optim.lr={lr}", f"trainer.max_steps={size['grpo_steps']}",
                 f"eval_every={size['grpo_steps']}", "trainer.log_every_n_steps=1"], work, "grpo")
    grpo_s = time.perf_counter() - sft_done
    sft_model, tok = zoo.load(sft.last_checkpoint)
    grpo_model, _ = zoo.load(tuned.last_checkpoint)
    steps = curve(tuned.output_dir)
    return {"held_out": len(held), "sft": accuracy(sft_model, tok, held),
            "grpo": accuracy(grpo_model, tok, held), "curve": steps, "grpo_seconds": grpo_s,
            "seconds": time.perf_counter() - started}


def measure(seeds: list[int], quick: bool = False, lr: float = 3e-4) -> dict[int, dict]:
    out = {}
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="zoo-grpo-") as work:
            out[seed] = one_seed(seed, SIZES[quick], Path(work), lr)
            print(f"seed {seed}: sft {out[seed]['sft']:.3f} grpo {out[seed]['grpo']:.3f} "
                  f"({out[seed]['seconds']:.0f} s)", flush=True)
    return out


def summary(results: dict[int, dict]) -> str:
    """Accuracy per seed and the reward curve in windows of 20 steps."""
    lines = ["| seed | SFT | GRPO | reward, steps 0-19 | last 20 steps | generation s / step | step s |",
             "|---|---|---|---|---|---|---|"]
    for seed, r in results.items():
        rewards = [c[1] for c in r["curve"]]
        gen = statistics.mean(c[2] for c in r["curve"] if c[2] > 0)
        step = statistics.mean(c[3] for c in r["curve"] if c[3] == c[3])
        lines.append(f"| {seed} | {r['sft']:.3f} | {r['grpo']:.3f} | {statistics.mean(rewards[:20]):.3f} | "
                     f"{statistics.mean(rewards[-20:]):.3f} | {gen:.3f} | {step:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO's learning rate")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the size's)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.steps is not None:
        SIZES[args.quick]["grpo_steps"] = args.steps
    results = measure(args.seeds, args.quick, args.lr)
    print(summary(results))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
