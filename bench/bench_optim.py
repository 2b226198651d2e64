"""Sample efficiency, AdamW vs Muon: optimizer steps until the validation loss first reaches a fixed target
on the built-in corpus (data=stdlib_text, a byte-level BPE), 3 seeds per optimizer. Steps, not seconds: the
count does not depend on how loaded the machine is (the seconds per step are listed beside it)."""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import zoo
from bench.common import Section, markdown_table
from zoo.tasks import build_data
from zoo.training.optim import build_optimizer, build_scheduler


@dataclass(frozen=True)
class Setup:
    """The run every seed and optimizer shares; only `optim.name` and the seed change."""

    max_bytes: int
    vocab: int
    seq_len: int
    batch: int
    max_steps: int
    eval_every: int
    val_batches: int
    target: float  # validation loss (nats/token) to reach
    lr: float = 3e-3
    warmup: int = 20
    model: tuple[tuple[str, object], ...] = (("n_layers", 2), ("d_model", 64), ("n_heads", 2),
                                             ("dropout", 0.0))
    seeds: tuple[int, ...] = (0, 1, 2)


SETUPS = {False: Setup(max_bytes=1_000_000, vocab=512, seq_len=64, batch=16, max_steps=500, eval_every=20,
                       val_batches=4, target=4.5),
          True: Setup(max_bytes=200_000, vocab=300, seq_len=32, batch=4, max_steps=20, eval_every=10,
                      val_batches=2, target=5.0, seeds=(0,))}
OPTIMIZERS = ("adamw", "muon")


def lm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"]).logits  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=-100)


def steps_to_target(setup: Setup, data, vocab_size: int, optim: str, seed: int) -> dict:
    """Train until the validation loss (mean over fixed batches, every eval_every steps) <= target."""
    torch.manual_seed(seed)
    model = zoo.build("gpt_small", **dict(setup.model), vocab_size=vocab_size, max_seq_len=setup.seq_len)
    cfg = {"name": optim, "lr": setup.lr, "weight_decay": 0.1, "betas": [0.9, 0.95]}
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, {"name": "constant", "warmup_steps": setup.warmup},
                                setup.max_steps)
    train_batches, val = data
    reached, losses, start = None, [], time.perf_counter()
    for step, batch in enumerate(train_batches, start=1):
        model.train()
        lm_loss(model, batch).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step % setup.eval_every == 0:
            model.eval()
            with torch.no_grad():
                loss = statistics.fmean(float(lm_loss(model, b)) for b in val)
            losses.append((step, loss))
            if loss <= setup.target:
                reached = step
                break
        if step >= setup.max_steps:
            break
    return {"steps": reached, "seconds_per_step": (time.perf_counter() - start) / step, "curve": losses}


def load(setup: Setup, seed: int, cache: str):
    """(train batches for max_steps with this data seed, fixed validation batches), and the vocabulary
    size."""
    tok, dm = build_data({"name": "stdlib_text", "max_bytes": setup.max_bytes},
                         {"name": "bpe", "vocab_size": setup.vocab}, task="lm", max_seq_len=setup.seq_len,
                         batch_size=setup.batch, cache_dir=cache, seed=seed)
    dm.setup("fit")
    train, batches = dm.train_dataloader(), []
    epoch = 0
    while len(batches) < setup.max_steps:  # as many epochs as max_steps needs
        train.sampler.set_epoch(epoch)
        batches += list(train)
        epoch += 1
    val = [b for _, b in zip(range(setup.val_batches), dm.val_dataloader(), strict=False)]
    return (batches[: setup.max_steps], val), tok.vocab_size


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.0f} ± {statistics.stdev(values):.0f}" if len(values) > 1 else f"{mean:.0f}"


def run(quick: bool = False) -> Section:
    setup = SETUPS[quick]
    results: dict[str, list[dict]] = {name: [] for name in OPTIMIZERS}
    threads = torch.get_num_threads()
    # step counts do not depend on it; on the loaded 2-core machine 1 thread is faster
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as cache:
            for seed in setup.seeds:  # each seed: the same data order and initial weights for both optimizers
                data, vocab_size = load(setup, seed, cache)
                for name in OPTIMIZERS:
                    results[name].append(steps_to_target(setup, data, vocab_size, name, seed))
    finally:
        torch.set_num_threads(threads)
    rows, means = [], {}
    for name, runs in results.items():
        steps = [r["steps"] for r in runs]
        reached = [s for s in steps if s is not None]
        means[name] = statistics.fmean(reached) if len(reached) == len(steps) else None
        rows.append([name, ", ".join(str(s) if s is not None else f"> {setup.max_steps}" for s in steps),
                     spread(reached) if means[name] is not None else "not all reached",
                     f"{statistics.fmean(r['seconds_per_step'] for r in runs) * 1000:.0f}"])
    ratio = means["adamw"] / means["muon"] if all(means.values()) else None
    headers = ["optimizer", f"steps to val loss <= {setup.target} (seeds {', '.join(map(str, setup.seeds))})",
               "mean ± std", "ms / step (1 thread)"]
    notes = [
        f"AdamW / Muon steps to the target: **{ratio:.2f}x**" if ratio else "A side did not reach the target "
        f"within {setup.max_steps} steps in every seed: no ratio.",
        f"gpt_small with {dict(setup.model)}, T={setup.seq_len}, batch {setup.batch}, data=stdlib_text "
        f"(first {setup.max_bytes:,} bytes), bpe vocab {setup.vocab}; validation loss = mean over "
        f"{setup.val_batches} fixed validation batches, every {setup.eval_every} steps "
        f"(so counts are multiples of {setup.eval_every}).",
        f"Both optimizers: `zoo.training.optim.build_optimizer`, lr {setup.lr} "
        "(not tuned per optimizer; Muon's step is RMS-matched to AdamW's), weight decay 0.1, betas "
        f"(0.9, 0.95), constant schedule after {setup.warmup} warm-up steps, clipping at 1.0. Muon runs on "
        "the attention/FFN matrices, AdamW on the rest. A seed fixes the initial weights and the batch "
        "order, the same for both optimizers.",
    ]
    return Section("Optimizers: steps to a validation loss, AdamW vs Muon", markdown_table(headers, rows),
                   notes, {"results": results})


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).markdown())
