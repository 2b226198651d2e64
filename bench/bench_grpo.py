"""Base -> SFT -> GRPO, measured (issue 39): the synthetic `a+b=` task of bench_post_training (a small decoder
pretrained here on text, then chat-SFT'd), then task=grpo from the SFT checkpoint on the training prompts with
answer_match as the only reward, through train.py's own runs (`train(cfg)`), for several seeds.

Two SFT datasets (`--sft`, bench_post_training.chat_rows): `clean` (every reply the sum), and `biased`, made
wrong on purpose: each combination 4 times, the reply the sum in a seeded 30% of the rows and the sum + 1 in
the rest, so the SFT model's greedy reply is mostly the wrong sum + 1 while its samples are sometimes right:
the case RL with a verifier is for (turning what sampling sometimes finds into the greedy answer).

Measured on the held-out fifth of the (a, b) combinations (held out of every stage), before (SFT) and after
(GRPO): greedy answer accuracy, and sampled accuracy (8 samples per prompt, temperature 1); and the GRPO run's
own curve: train/reward (its sampled completions' mean reward, training prompts), frac_reward_zero_std (the
share of groups with no learning signal), rollout time (time/generation_s) and update time (time/step_s: from
one rollout's end to the next one's start) per step, and completion tokens per second of each.

    python -m bench.bench_grpo --sft biased --seeds 0 1 2 --out results.json
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_post_training import (
    COMMON,
    accuracy,
    base_then_sft,
    run,
    sampled_accuracy,
    user,
    write_jsonl,
)

SIZES = {  # quick: checks the pipeline in a minute, measures nothing
    False: dict(n=20, base_steps=600, sft_steps=300, grpo_steps=120, d_model=64, layers=2),
    True: dict(n=6, base_steps=10, sft_steps=10, grpo_steps=4, d_model=32, layers=1),
}
SFT_DATA = {  # bench_post_training.chat_rows' arguments (module docstring)
    "clean": dict(right_share=1.0, copies=1),
    "biased": dict(right_share=0.3, copies=4),
}
PROMPTS, GROUP = 8, 8  # prompts per step, completions per prompt
GRPO = ["grpo.rewards=[answer_match]", f"grpo.num_generations={GROUP}", "grpo.max_completion_length=4",
        "grpo.temperature=1.0", f"batch_size={PROMPTS}", "scheduler.warmup_steps=5"]
SAMPLES = 8  # samples per held-out prompt for the sampled accuracy
WINDOW = 20  # steps per window of the reward curve


def curve(run_dir: Path) -> list[dict[str, float]]:
    """Each logged training step's step, train/reward, frac_reward_zero_std, rollout and update seconds
    (nan where not logged: step 0 has no update before it) and mean completion length."""
    keys = {"reward": "train/reward", "zero_std": "train/frac_reward_zero_std",
            "generation_s": "train/time/generation_s", "update_s": "train/time/step_s",
            "length": "train/completions/mean_length"}
    with open(run_dir / "csv" / "metrics.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/reward")]
    return [{"step": int(r["step"]), **{k: float(r.get(col) or "nan") for k, col in keys.items()}}
            for r in rows]


def held_out(model, tok, held: list[tuple[int, int]], seed: int) -> dict[str, float]:
    """Greedy and sampled (SAMPLES per prompt, temperature 1) answer accuracy on the held-out prompts."""
    return {"greedy": accuracy(model, tok, held),
            "sampled": sampled_accuracy(model, tok, held, SAMPLES, seed)}


def one_seed(seed: int, size: dict, work: Path, lr: float = 3e-4, sft_data: str = "biased") -> dict:
    import zoo

    train_combos, held, _, sft, started = base_then_sft(seed, size, work, **SFT_DATA[sft_data])
    prompts = write_jsonl(work / "prompts.jsonl", [{"prompt": user(a, b), "answer": str(a + b)}
                                                   for a, b in train_combos])
    sft_done = time.perf_counter()
    tuned = run([*COMMON, f"seed={seed}", "task=grpo", f"init_from={sft.last_checkpoint}", "data=prompts",
                 f"data.path={prompts}", *GRPO, f"optim.lr={lr}", f"trainer.max_steps={size['grpo_steps']}",
                 f"eval_every={size['grpo_steps']}", "trainer.log_every_n_steps=1"], work, "grpo")
    grpo_s = time.perf_counter() - sft_done
    sft_model, tok = zoo.load(sft.last_checkpoint)
    grpo_model, _ = zoo.load(tuned.last_checkpoint)
    return {"held_out": len(held), "sft": held_out(sft_model, tok, held, seed),
            "grpo": held_out(grpo_model, tok, held, seed), "curve": curve(tuned.output_dir),
            "grpo_seconds": grpo_s, "seconds": time.perf_counter() - started}


def measure(seeds: list[int], quick: bool = False, lr: float = 3e-4, sft_data: str = "biased"
            ) -> dict[int, dict]:
    out = {}
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="zoo-grpo-") as work:
            out[seed] = r = one_seed(seed, SIZES[quick], Path(work), lr, sft_data)
            print(f"seed {seed}: greedy {r['sft']['greedy']:.3f} -> {r['grpo']['greedy']:.3f}, sampled "
                  f"{r['sft']['sampled']:.3f} -> {r['grpo']['sampled']:.3f} ({r['seconds']:.0f} s)",
                  flush=True)
    return out


def windows(values: list[float]) -> str:
    """Means of consecutive WINDOW-step windows, ' -> '-joined."""
    return " -> ".join(f"{statistics.mean(values[i:i + WINDOW]):.2f}" for i in range(0, len(values), WINDOW))


def rate(tokens: list[float], seconds: list[float]) -> float:
    """Completion tokens per second over the steps where both were logged."""
    pairs = [(t, s) for t, s in zip(tokens, seconds, strict=True) if s == s and s > 0]
    return sum(t for t, _ in pairs) / sum(s for _, s in pairs)


def summary(results: dict[int, dict]) -> str:
    """Held-out accuracies per seed (and their mean), the reward and zero-std curves in windows, and the
    rollout vs update cost per step."""
    lines = ["| seed | greedy SFT -> GRPO | sampled SFT -> GRPO | train/reward by 20 steps | "
             "frac_reward_zero_std by 20 steps | rollout s / step | update s / step | rollout tok/s | "
             "update tok/s |", "|---|---|---|---|---|---|---|---|---|"]
    for seed, r in results.items():
        c = r["curve"]
        tokens = [x["length"] * PROMPTS * GROUP for x in c]  # completion tokens per step
        gen, upd = [x["generation_s"] for x in c], [x["update_s"] for x in c]
        lines.append(
            f"| {seed} | {r['sft']['greedy']:.3f} -> {r['grpo']['greedy']:.3f} | "
            f"{r['sft']['sampled']:.3f} -> {r['grpo']['sampled']:.3f} | "
            f"{windows([x['reward'] for x in c])} | {windows([x['zero_std'] for x in c])} | "
            f"{statistics.mean(gen):.3f} | "
            f"{statistics.mean(u for u in upd if u == u):.3f} | {rate(tokens, gen):.0f} | "
            f"{rate(tokens[:-1], upd[1:]):.0f} |")  # step k's update_s is step k-1's update
    mean = lambda stage, key: statistics.mean(r[stage][key] for r in results.values())  # noqa: E731
    lines.append(f"| mean | {mean('sft', 'greedy'):.3f} -> {mean('grpo', 'greedy'):.3f} | "
                 f"{mean('sft', 'sampled'):.3f} -> {mean('grpo', 'sampled'):.3f} | | | | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sft", choices=sorted(SFT_DATA), default="biased", help="the SFT rows' answers")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO's learning rate")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the size's)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.steps is not None:
        SIZES[args.quick]["grpo_steps"] = args.steps
    results = measure(args.seeds, args.quick, args.lr, args.sft)
    print(summary(results))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
