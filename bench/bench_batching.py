"""Batching: token-budget batches of similar lengths (`data.max_tokens`) vs random batches of `batch_size`
padded to their longest member, on the built-in translation data (translation_toy) with transformer_tiny:
the padding share of a whole epoch, and training tokens/s (real, non-pad source + target tokens through
forward, backward and an AdamW step), the two sides timed alternately."""

from __future__ import annotations

import tempfile
from collections.abc import Callable

import torch

from bench.common import Section, interleaved, markdown_table
from zoo.data.datamodules import Seq2SeqDataModule
from zoo.presets import build
from zoo.tasks import build_data

SIZES = {False: {"n_pairs": 6000, "batch_size": 32, "steps": 48, "max_seq_len": 64},
         True: {"n_pairs": 400, "batch_size": 8, "steps": 2, "max_seq_len": 32}}


def epoch_batches(dm: Seq2SeqDataModule) -> list[dict[str, torch.Tensor]]:
    """One training epoch of collated batches, in the data module's order."""
    return list(dm.train_dataloader())


def padding_share(batches: list[dict[str, torch.Tensor]]) -> float:
    """Pad tokens / all tokens, source and decoder inputs together."""
    real = total = 0
    for b in batches:
        for mask in (b["attention_mask"], b["decoder_attention_mask"]):
            real, total = real + int(mask.sum()), total + mask.numel()
    return 1.0 - real / total


def real_tokens(batches: list[dict[str, torch.Tensor]]) -> int:
    return sum(int(b["attention_mask"].sum() + b["decoder_attention_mask"].sum()) for b in batches)


def train_steps(model, optimizer, batches: list[dict[str, torch.Tensor]]) -> Callable[[], None]:
    def run() -> None:
        for batch in batches:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return run


def run(quick: bool = False) -> Section:
    size = SIZES[quick]
    warmup, repeats = (1, 2) if quick else (2, 9)
    data_cfg = {"name": "translation_toy", "n_pairs": size["n_pairs"], "n_test": 50}
    with tempfile.TemporaryDirectory() as cache:
        tok, dm = build_data(data_cfg, {"name": "bpe", "vocab_size": 1000}, task="seq2seq",
                             max_seq_len=size["max_seq_len"], batch_size=size["batch_size"], cache_dir=cache,
                             seed=0)
    sizes, _ = dm.example_sizes("train")
    # the same real tokens per batch, on average
    max_tokens = int(round(size["batch_size"] * float(sizes.mean())))
    randomly = epoch_batches(dm)
    dm.max_tokens = max_tokens
    bucketed = epoch_batches(dm)
    model = build("transformer_tiny", vocab_size=tok.vocab_size, max_seq_len=size["max_seq_len"], dropout=0.0,
                  pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n = size["steps"]
    sides = {"random": train_steps(model, optimizer, randomly[:n]),
             "budget": train_steps(model, optimizer, bucketed[:n])}
    tm = interleaved(sides, warmup=warmup, repeats=repeats)
    speed = {k: real_tokens(b[:n]) / tm[k].median for k, b in (("random", randomly), ("budget", bucketed))}
    share = {"random": padding_share(randomly), "budget": padding_share(bucketed)}
    rows = [[f"random, batch_size={size['batch_size']}", len(randomly), f"{share['random']:.1%}",
             f"{speed['random']:,.0f}", f"{tm['random'].spread:.0%}", "1.00x"],
            [f"token budget, max_tokens={max_tokens}", len(bucketed), f"{share['budget']:.1%}",
             f"{speed['budget']:,.0f}", f"{tm['budget'].spread:.0%}",
             f"{speed['budget'] / speed['random']:.2f}x"]]
    headers = ["batches", "per epoch", "padding share", "real tokens/s", "spread", "tokens/s vs random"]
    notes = [
        f"translation_toy, {size['n_pairs']} pairs (train {len(sizes)}), BPE vocab {tok.vocab_size}, "
        f"model.max_seq_len={size['max_seq_len']}; the transformer_tiny preset, fp32, dropout 0, AdamW.",
        "max_tokens = batch_size x mean pair length (the longer side), so both sides carry about the same "
        "real tokens per batch; the padding share is over a whole epoch, source and decoder inputs together.",
        f"tokens/s: the first {n} batches of each side's epoch, trained in alternation "
        f"({repeats} repeats after {warmup} warm-up, median); spread = (max - min) / median of the repeats, "
        "a measure of the machine's load.",
        "Token-budget batches are cut from the examples sorted by length (ties in a seeded order) and "
        "shuffled (zoo/data/batching.py); random batches are "
        "the epoch-keyed shuffle of `batch_size` examples.",
        "Ceiling from padding alone: with about the same real tokens per batch, removing padding can speed "
        f"a compute-bound step up by at most (1 - {share['budget']:.1%}) / (1 - {share['random']:.1%}) = "
        f"{(1 - share['budget']) / (1 - share['random']):.2f}x; per-step costs that do not scale with tokens "
        "(optimizer, launch overhead) lower it further at this tiny size.",
    ]
    goals = [("batching: real-token share of token-budget batches (padding < 10%)", 1.0 - share["budget"],
              0.9),
             ("batching: tokens/s, token budget vs random batches", speed["budget"] / speed["random"], 1.3)]
    return Section("Batching: token budget vs random batches (seq2seq)", markdown_table(headers, rows), notes,
                   data={"padding": share, "tokens_per_s": speed, "max_tokens": max_tokens}, goals=goals)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).markdown())
