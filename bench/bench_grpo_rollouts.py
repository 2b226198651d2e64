"""GRPO rollouts (issue 39 item 4): which of zoo's decoding paths samples a GRPO generation batch fastest.
A batch is B prompts x G completions (each prompt's group together, prompts of 6-16 tokens or
`--prompt-tokens`, left-padded), sampled at temperature 1 up to `max_completion_length` new tokens, rows
ending at eos at different lengths. Sides:

- `dynamic`: `model.generate` with the growing KV cache on the B x G repeated prompts (task=grpo's rollouts
  before they ran each prompt once);
- `static`: the same with `cache_implementation="static"` (pre-allocated cache, eager one-token step);
- `compiled`: `compile=True` (the static cache's one-token step through torch.compile, gpt-fast style);
- `prompt once`: `model.generate` with the growing cache on the B distinct prompts with
  `num_return_sequences=G` (each prompt run once, its cache then copied to its G rows): what task=grpo's
  rollouts call now;
- `engine`: zoo's continuous-batching engine (zoo.generation.continuous.engine: a finished row leaves the
  batch at the next step), driven step by step in this process, every row a request with its own seeded
  sampler.

The generate sides are checked to give the same tokens for the same seed before timing (generate's one
generator draws for every row); the engine draws each row from its own generator (tokens as `generate`
gives that row alone), so its samples differ and its tokens/s counts its own rows. Models have random
weights; an eos logit bias (the head made a biased Linear, the bias 0 except at eos) sets the chance of eos
per token to about 1.5 / max_completion_length, so completions end throughout the budget and about a fifth
run to the cap (the measured mean length and capped share are in the table). Timing: each side once untimed
(the compiled side's compile is timed there, as "first call"), then `repeats` rounds alternating the sides
(bench.common.interleaved), a new seed each round, the same seeds for every side; tokens/s = completion
tokens (through eos) / seconds, the median round. One torch thread.

    python -m bench.bench_grpo_rollouts [--quick] [--prompt-tokens 64 96] [--lengths 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import zoo
from bench.common import Section, interleaved, machine_info, markdown_table
from zoo.generation.config import GenerationConfig
from zoo.generation.continuous.engine import Engine, Sequence

GENERATE = {"dynamic": {}, "static": {"cache_implementation": "static"}, "compiled": {"compile": True},
            "prompt once": {}}  # "prompt once": B prompts with num_return_sequences=G
MODELS = {  # the GRPO demo's size (bench/bench_post_training.py) and a 7M-parameter llama
    "gpt_nano d64 L2 (demo)": ("gpt_nano", dict(d_model=64, n_heads=4, n_layers=2, max_seq_len=128)),
    "llama_small": ("llama_small", {}),
}
SIZES = {False: dict(prompts=8, generations=8, lengths=(16, 64), repeats=5),
         True: dict(prompts=2, generations=2, lengths=(8,), repeats=1)}


@dataclass
class Rollouts:
    """One side's sampled batch: completions (through eos), and their token count."""

    rows: list[list[int]]

    @property
    def tokens(self) -> int:
        return sum(len(r) for r in self.rows)


def with_eos_bias(model: torch.nn.Module, chance: float) -> torch.nn.Module:
    """The model with its head's projection a biased Linear whose bias makes eos about `chance` likely per
    token on random weights (logits near 0 elsewhere: softmax weight e^b against vocab_size - 1 others)."""
    proj, vocab, eos = model.head.proj, model.config.vocab_size, model.config.eos_id
    biased = torch.nn.Linear(proj.in_features, proj.out_features, bias=True)
    with torch.no_grad():
        biased.weight = proj.weight  # shared (tied embeddings stay tied)
        biased.bias.zero_()
        biased.bias[eos] = math.log(chance * (vocab - 1) / (1 - chance))
    model.head.proj = biased
    return model


def prompt_batch(model, prompts: int, generations: int, tokens: tuple[int, int] = (6, 16), seed: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) (B G, P): `prompts` random prompts of tokens[0] to tokens[1] tokens, left-padded, each
    repeated G times."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(tokens[0], tokens[1] + 1, (prompts,), generator=g).tolist()
    width, cfg = max(lengths), model.config
    ids = torch.full((prompts, width), cfg.pad_id, dtype=torch.long)
    mask = torch.zeros(prompts, width, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, width - n:] = torch.randint(3, cfg.vocab_size, (n,), generator=g)
        mask[i, width - n:] = 1
    return ids.repeat_interleave(generations, 0), mask.repeat_interleave(generations, 0)


def cut(row: list[int], eos: int) -> list[int]:
    return row[:row.index(eos) + 1] if eos in row else row


def generate_side(model, ids, mask, budget: int, options: dict, copies: int = 1) -> Callable[[int], Rollouts]:
    """`copies` > 1: every `copies`-th row (the distinct prompts), each sampled `copies` times."""
    eos, width = model.config.eos_id, ids.shape[1]
    ids, mask = ids[::copies], mask[::copies]
    more = {"num_return_sequences": copies} if copies > 1 else {}

    def sample(seed: int) -> Rollouts:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=budget, do_sample=True, temperature=1.0,
                             seed=seed, eos_token_id=[eos], **options, **more)
        return Rollouts([cut(r, eos) for r in out[:, width:].tolist()])

    return sample


def engine_side(model, ids, mask, budget: int) -> Callable[[int], Rollouts]:
    """The serving engine stepped in this thread until every row finished (rows join at once, leave when
    done)."""
    eos, device = model.config.eos_id, next(model.parameters()).device
    prompts = [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)]

    def sample(seed: int) -> Rollouts:
        got: list[list[int]] = [[] for _ in prompts]

        def deliver(i: int) -> Callable:
            return lambda token, finish, _logprob: token is not None and got[i].append(token)

        seqs = [Sequence(p, budget, GenerationConfig(do_sample=True, temperature=1.0,
                                                     seed=seed * 100_003 + i).choice(device),
                         frozenset([eos]), deliver(i))
                for i, p in enumerate(prompts)]
        engine = Engine(model, pad_id=model.config.pad_id, max_batch=len(seqs), max_queue=len(seqs))
        with torch.inference_mode():
            engine.step(seqs)
            while not all(s.done for s in seqs):
                engine.step([])
        return Rollouts(got)

    return sample


def workload(model, prompts: int, generations: int, budget: int, repeats: int,
             prompt_tokens: tuple[int, int]) -> list[dict]:
    ids, mask = prompt_batch(model, prompts, generations, prompt_tokens)  # (B G, P)
    samplers = {**{side: generate_side(model, ids, mask, budget, GENERATE[side],
                                       generations if side == "prompt once" else 1) for side in GENERATE},
                "engine": engine_side(model, ids, mask, budget)}
    first = {}
    for side, sample in samplers.items():  # the compiled side compiles here
        start = time.perf_counter()
        sample(0)
        first[side] = time.perf_counter() - start
    reference = samplers["dynamic"](10_000)
    same = {side: samplers[side](10_000).rows == reference.rows for side in GENERATE}
    produced: dict[str, list[Rollouts]] = {side: [] for side in samplers}

    def timed(side: str) -> Callable[[], None]:
        def call() -> None:
            produced[side].append(samplers[side](len(produced[side]) + 1))
        return call

    times = interleaved({side: timed(side) for side in samplers}, warmup=0, repeats=repeats)
    rows = []
    for side in samplers:
        runs = produced[side]
        tokens = sum(r.tokens for r in runs) / len(runs)
        lengths = [len(row) for r in runs for row in r.rows]
        capped = sum(len(row) == budget and row[-1] != model.config.eos_id for r in runs for row in r.rows)
        rows.append({"side": side, "tokens_per_s": tokens / times[side].median, "seconds": times[side].median,
                     "spread": times[side].spread,
                     "round_seconds": times[side].seconds, "first_call_s": first[side],
                     "mean_length": sum(lengths) / len(lengths), "capped": capped / len(lengths),
                     "same_tokens_as_dynamic": same.get(side)})
    return rows


def run(quick: bool = False, prompt_tokens: tuple[int, int] = (6, 16), lengths: tuple[int, ...] | None = None
        ) -> Section:
    size = {**SIZES[quick], **({"lengths": lengths} if lengths else {})}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: two oversubscribe this shared 2-core machine (bench/decoding)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    results = []
    try:
        for label, (preset, overrides) in MODELS.items():
            for budget in size["lengths"]:
                torch.manual_seed(0)
                model = zoo.build(preset, **overrides).eval()
                model = with_eos_bias(model, 1.5 / budget)
                for row in workload(model, size["prompts"], size["generations"], budget, size["repeats"],
                                    prompt_tokens):
                    results.append({"model": label, "budget": budget, "prompt_tokens": list(prompt_tokens),
                                    **row})
                print(f"{label} max_completion_length={budget}: done", flush=True)
    finally:
        torch.set_num_threads(threads)
    base = {(r["model"], r["budget"]): r["tokens_per_s"] for r in results if r["side"] == "dynamic"}
    table = markdown_table(
        ["model", "max_completion_length", "path", "rollout tok/s", "/ dynamic", "s per batch", "spread",
         "first call s", "mean length", "capped", "same tokens"],
        [[r["model"], r["budget"], r["side"], f"{r['tokens_per_s']:.0f}",
          f"{r['tokens_per_s'] / base[r['model'], r['budget']]:.2f}", f"{r['seconds']:.2f}",
          f"{r['spread']:.2f}",
          f"{r['first_call_s']:.1f}", f"{r['mean_length']:.1f}", f"{r['capped']:.2f}",
          {True: "yes", False: "NO", None: "own seeds"}[r["same_tokens_as_dynamic"]]] for r in results])
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lo, hi = prompt_tokens
    notes = [f"{size['prompts']} prompts of {lo}-{hi} tokens x {size['generations']} completions per batch, "
             f"temperature 1, one torch thread; {size['repeats']} interleaved rounds per side, median; load "
             f"average {load:.1f} at the start, {load_end:.1f} at the end",
             "same tokens: the side's completions for one seed equal the dynamic cache's (engine: own seeds "
             "per row, not comparable token for token)"]
    return Section("GRPO rollouts: decoding paths", table, notes,
                   data={"rows": results, "machine": machine_info()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--json", help="also write the section's rows and machine to this file")
    parser.add_argument("--prompt-tokens", type=int, nargs=2, default=(6, 16), metavar=("MIN", "MAX"),
                        help="prompt lengths drawn from MIN..MAX tokens (default 6 16)")
    parser.add_argument("--lengths", type=int, nargs="+", help="max_completion_length values (default 16 64)")
    args = parser.parse_args()
    section = run(args.quick, tuple(args.prompt_tokens), tuple(args.lengths) if args.lengths else None)
    print(section.markdown())
    if args.json:
        record = {"title": section.title, "notes": section.notes, **section.data}
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
