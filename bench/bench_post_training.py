"""Base -> SFT -> DPO, measured (issue 38): a small decoder pretrained here on text, chat-SFT'd on a synthetic
task with a verifiable answer, then DPO'd on preference pairs built from its own samples, through train.py's
own runs (`train(cfg)`, the issue's command lines) and evaluate.py, for several seeds.

The task: `a+b=` for a, b in 0..N-1, the answer the sum. A seeded fifth of the (a, b) combinations is held out
of every stage (pretraining text, SFT rows, DPO pairs). Per seed:

1. base: task=lm on text lines `a+b=c` of the training combinations;
2. SFT: task=sft init_from=<base> data=chat, rows {user: "a+b=", assistant: "c"};
3. pairs: for each prompt, K samples of the SFT model (temperature 1); chosen = a right sample (else the right
   answer), rejected = a wrong sample (a prompt whose K samples are all right gives no pair);
4. DPO: task=dpo init_from=<sft> data=preference on the training prompts' pairs.

Measured on the held-out combinations: answer accuracy (greedy reply, parsed as an integer) of base, SFT, DPO
(the base asked in the chat template and, fairly, in its own text form `a+b=`), and preference accuracy on the
held-out pairs (built the same way from the SFT model): the share of pairs where the model gives the chosen
reply a higher log-probability than the rejected one, for SFT and DPO, and evaluate.py's
`rewards/accuracies` of the DPO checkpoint against its reference (the SFT checkpoint).

    python -m bench.bench_post_training --seeds 0 1 2      # or: python -m bench.run --sections post_training
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bench.common import Section, markdown_table

ROOT = Path(__file__).resolve().parents[1]
SIZES = {  # quick: checks the pipeline in a minute, measures nothing
    False: dict(n=20, base_steps=600, sft_steps=300, dpo_steps=150, samples=4, d_model=64, layers=2),
    True: dict(n=6, base_steps=10, sft_steps=10, dpo_steps=4, samples=2, d_model=32, layers=1),
}
MODEL = ["model=gpt_nano", "model.n_heads=4", "model.max_seq_len=64", "model.dropout=0.0",
         "tokenizer.vocab_size=300"]
# the preference stage's variants: DPO, and RPO (DPO + the chosen replies' NLL, dpo.sft_weight)
VARIANTS = {"dpo": [], "rpo": ["dpo.sft_weight=1.0"]}
COMMON = ["logger=csv", "trainer.accelerator=cpu", "trainer.num_sanity_val_steps=0",
          "trainer.enable_progress_bar=false", "callbacks.samples=null", "callbacks.progress_bar=null"]


def combos(n: int, seed: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(train, held-out) (a, b) combinations: a seeded fifth held out."""
    every = [(a, b) for a in range(n) for b in range(n)]
    random.Random(seed).shuffle(every)
    held = len(every) // 5
    return sorted(every[held:]), sorted(every[:held])


def user(a: int, b: int) -> list[dict]:
    return [{"role": "user", "content": f"{a}+{b}="}]


def run(cfg_overrides: list[str], work: Path, name: str):
    """train.py's run with these overrides (composed as train.py composes them), into work/<name>."""
    from hydra import compose, initialize_config_dir

    from zoo.hydra_schema import part_overrides
    from zoo.training.hydra_configs import register_train_configs
    from zoo.training.run import train

    register_train_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[
            *part_overrides(cfg_overrides), f"paths.output_dir={work / name}",
            f"paths.runs_dir={work / 'runs'}", f"paths.cache_dir={work / 'cache'}"])
    return train(cfg)


def reply(model, tok, ids: list[int], *, sample: bool = False, seed: int = 0) -> str:
    out = model.generate([ids], max_new_tokens=4, eos_token_id=tok.eos_id, do_sample=sample,
                         temperature=1.0 if sample else None, seed=seed if sample else None)[0, len(ids):]
    new = out.tolist()
    return tok.decode(new[: new.index(tok.eos_id)] if tok.eos_id in new else new)


def answer(text: str) -> int | None:
    found = re.match(r"\s*(-?\d+)", text)
    return int(found.group(1)) if found else None


def accuracy(model, tok, held: list[tuple[int, int]], *, chat: bool = True) -> float:
    """Share of held-out prompts whose greedy reply is the sum."""
    right = 0
    for a, b in held:
        ids = tok.chat_ids(user(a, b)) if chat else tok.encode(f"{a}+{b}=")
        right += answer(reply(model, tok, ids)) == a + b
    return right / len(held)


def sampled_accuracy(model, tok, held: list[tuple[int, int]], k: int, seed: int) -> float:
    """Share of `k` samples per held-out prompt (temperature 1, chat form) whose reply is the sum: pass@1 of
    sampling, in one left-padded generate call."""
    from zoo.tasks.grpo_batch import pad_rows

    ids, mask = pad_rows([tok.chat_ids(user(a, b)) for a, b in held], tok.padding_id, "left")
    out = model.generate(ids.repeat_interleave(k, 0), attention_mask=mask.repeat_interleave(k, 0),
                         max_new_tokens=4, eos_token_id=tok.eos_id, do_sample=True, temperature=1.0,
                         seed=seed)
    right = 0
    for row, new in enumerate(out[:, ids.shape[1]:].tolist()):
        a, b = held[row // k]
        right += answer(tok.decode(new[: new.index(tok.eos_id)] if tok.eos_id in new else new)) == a + b
    return right / (len(held) * k)


def pairs_from_samples(model, tok, prompts: list[tuple[int, int]], k: int, seed: int) -> list[dict]:
    """trl's conversational preference rows from `model`'s own samples (module docstring, step 3)."""
    rows = []
    for i, (a, b) in enumerate(prompts):
        ids = tok.chat_ids(user(a, b))
        texts = [reply(model, tok, ids, sample=True, seed=seed * 100_003 + i * k + j).strip()
                 for j in range(k)]
        wrong = [t for t in texts if answer(t) != a + b and t]
        if not wrong:
            continue
        right = next((t for t in texts if answer(t) == a + b), str(a + b))
        rows.append({"prompt": user(a, b), "chosen": [{"role": "assistant", "content": right}],
                     "rejected": [{"role": "assistant", "content": wrong[0]}]})
    return rows


def preference_accuracy(model, tok, rows: list[dict]) -> float:
    """Share of pairs where `model` gives the chosen reply a higher summed log-probability than the
    rejected one."""
    from zoo.data.preference import collate_pairs, encode_preference, parse_row
    from zoo.tasks.preference import policy_logps

    pairs = [encode_preference(parse_row(r, f"pair {i}"), tok) for i, r in enumerate(rows)]
    with torch.no_grad():
        logps, _ = policy_logps(model.eval(), collate_pairs(pairs, tok.padding_id))
    n = len(pairs)
    return float((logps[:n] > logps[n:]).float().mean())


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def chat_rows(train_combos: list[tuple[int, int]], seed: int, right_share: float = 1.0, copies: int = 1
              ) -> list[dict]:
    """SFT rows {user: "a+b=", assistant: answer}, each combination `copies` times; the answer is the sum in a
    seeded `right_share` of the rows and the sum + 1 (one systematic wrong answer) in the rest."""
    rng = random.Random(seed * 7 + 1)
    return [{"messages": [*user(a, b), {"role": "assistant",
                                        "content": str(a + b + (rng.random() >= right_share))}]}
            for _ in range(copies) for a, b in train_combos]


def base_then_sft(seed: int, size: dict, work: Path, right_share: float = 1.0, copies: int = 1):
    """The shared first two stages: a base model trained on the train sums' equations as text, then SFT'd on
    them as chats (`chat_rows`: right_share < 1 teaches a biased reply). (train combos, held-out combos, base
    run, SFT run, perf_counter at the start)."""
    train_combos, held = combos(size["n"], seed)
    model = [*MODEL, f"model.d_model={size['d_model']}", f"model.n_layers={size['layers']}", f"seed={seed}"]
    lines = [f"{a}+{b}={a + b}" for a, b in train_combos]
    random.Random(seed).shuffle(lines)
    text = work / "equations.txt"
    text.write_text("\n".join(lines * 4) + "\n", encoding="utf-8")  # the last 10% is its validation text
    started = time.perf_counter()
    base = run([*model, *COMMON, "task=lm", "data=text", f"data.files={text}", "batch_size=16",
                f"trainer.max_steps={size['base_steps']}", f"eval_every={size['base_steps']}",
                "optim.lr=3e-3", "scheduler.warmup_steps=20"], work, "base")
    chats = write_jsonl(work / "chats.jsonl", chat_rows(train_combos, seed, right_share, copies))
    sft = run([*COMMON, f"seed={seed}", "task=sft", f"init_from={base.last_checkpoint}", "data=chat",
               f"data.path={chats}", "batch_size=16", f"trainer.max_steps={size['sft_steps']}",
               f"eval_every={size['sft_steps']}", "optim.lr=1e-3", "scheduler.warmup_steps=10"], work, "sft")
    return train_combos, held, base, sft, started


def one_seed(seed: int, size: dict, work: Path) -> dict[str, float]:
    import zoo
    from zoo.evaluation.run import evaluate

    train_combos, held, base, sft, started = base_then_sft(seed, size, work)
    sft_model, tok = zoo.load(sft.last_checkpoint)
    train_pairs = pairs_from_samples(sft_model, tok, train_combos, size["samples"], seed)
    held_pairs = pairs_from_samples(sft_model, tok, held, size["samples"], seed + 1)
    pair_file = write_jsonl(work / "pairs.jsonl", train_pairs)
    base_model, base_tok = zoo.load(base.last_checkpoint)
    held_file = write_jsonl(work / "held.jsonl", held_pairs)
    out = {"held_out": len(held), "train_pairs": len(train_pairs), "held_pairs": len(held_pairs),
           "base_chat": accuracy(base_model, base_tok, held),
           "base_text": accuracy(base_model, base_tok, held, chat=False),
           "sft": accuracy(sft_model, tok, held), "pref_sft": preference_accuracy(sft_model, tok, held_pairs)}
    for name, extra in VARIANTS.items():
        tuned = run([*COMMON, f"seed={seed}", "task=dpo", f"init_from={sft.last_checkpoint}",
                     "data=preference", f"data.path={pair_file}", "dpo.beta=0.1", "dpo.loss_type=sigmoid",
                     *extra, "batch_size=8", f"trainer.max_steps={size['dpo_steps']}",
                     f"eval_every={size['dpo_steps']}", "optim.lr=1e-4", "scheduler.warmup_steps=5"],
                    work, name)
        tuned_model, _ = zoo.load(tuned.last_checkpoint)
        report = evaluate({"ckpt": str(tuned.last_checkpoint), "reference": str(sft.last_checkpoint),
                           "data": {"name": "preference", "path": str(held_file), "val_fraction": 0.1,
                                    "num_workers": 0, "truncate": True},
                           "split": "all", "batch_size": 16, "max_examples": None, "device": "cpu", "seed": 0,
                           "output": None, "name": "evaluate", "paths": {"cache_dir": str(work / "cache")},
                           "generation": {}})
        out |= {name: accuracy(tuned_model, tok, held),
                f"pref_{name}": preference_accuracy(tuned_model, tok, held_pairs),
                f"{name}_reward_accuracy": report.metrics["rewards/accuracies"],
                f"{name}_val_reward_accuracy": tuned.metrics["val/rewards/accuracies"]}  # training prompts
    return {**out, "seconds": time.perf_counter() - started}


def measure(seeds: list[int], quick: bool = False) -> dict[int, dict[str, float]]:
    size = SIZES[quick]
    out = {}
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="zoo-post-training-") as work:
            out[seed] = one_seed(seed, size, Path(work))
            print(f"seed {seed}: {out[seed]}", flush=True)
    return out


def section(results: dict[int, dict[str, float]], quick: bool) -> Section:
    size = SIZES[quick]
    cols = ("base_chat", "base_text", "sft", *VARIANTS, "pref_sft", *(f"pref_{v}" for v in VARIANTS),
            *(f"{v}_reward_accuracy" for v in VARIANTS), *(f"{v}_val_reward_accuracy" for v in VARIANTS))
    rows = [[seed, *(f"{r[c]:.2f}" for c in cols), r["train_pairs"], r["held_pairs"]]
            for seed, r in results.items()]
    means = [statistics.mean(r[c] for r in results.values()) for c in cols]
    rows.append(["mean", *(f"{m:.2f}" for m in means), "", ""])
    heads = ["base (chat)", "base (text)", "SFT", *(v.upper() for v in VARIANTS), "pref. SFT",
             *(f"pref. {v.upper()}" for v in VARIANTS), *(f"reward acc. {v.upper()}" for v in VARIANTS),
             *(f"train-prompt reward acc. {v.upper()}" for v in VARIANTS)]
    table = markdown_table(["seed", *heads, "train pairs", "held-out pairs"], rows)
    notes = [f"a+b= for a, b < {size['n']}: {size['n'] ** 2} combinations, a seeded fifth held out of every "
             f"stage; gpt_nano-shaped decoder (d {size['d_model']}, {size['layers']} layers), base "
             f"{size['base_steps']} LM steps, SFT {size['sft_steps']}, DPO / RPO {size['dpo_steps']} steps "
             f"of 8 pairs (beta 0.1, sigmoid, lr 1e-4; RPO adds dpo.sft_weight=1), {size['samples']} samples "
             "per prompt for the pairs",
             "base / SFT / DPO / RPO: held-out greedy answer accuracy (base asked in the chat template, and "
             "in its own text form); pref.: share of held-out pairs where the model's log-prob of the chosen "
             "reply beats the rejected one's; reward acc.: evaluate.py's rewards/accuracies against the SFT "
             "checkpoint on the held-out pairs; train-prompt reward acc.: the same in training's validation "
             "(pairs of training prompts held out by data=preference)"]
    return Section("Base -> SFT -> DPO (issue 38)", table, notes, {"results": results, "size": size})


def run_section(quick: bool) -> Section:
    return section(measure([0, 1, 2] if not quick else [0], quick), quick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    results = measure(args.seeds, args.quick)
    print(section(results, args.quick).markdown())
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
