"""What a trained model produces at the end of fit, shown as a table: each task's `samples` method
(zoo/tasks/) fills a SampleReport; `translate` is the greedy decoding translation samples and the
exact-match callback share. Decoding goes through `zoo.generation`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zoo.utils import eval_mode


@dataclass
class Sample:
    """One row of the samples table."""

    input: str
    output: str
    reference: str = ""


@dataclass
class SampleReport:
    samples: list[Sample]
    metrics: dict[str, float]


def translate(model, tokenizer, sources: Sequence[str], *, max_new_tokens: int, batch_size: int = 64) -> list[str]:
    """Greedy translations of `sources` (decoded without special tokens)."""
    out: list[str] = []
    max_src = model.config.max_seq_len
    for start in range(0, len(sources), batch_size):
        # framed as in training (T5: `x </s>`); an empty source becomes one unknown token
        ids = [tokenizer.specials.source(tokenizer.encode(s), max_src).tolist() or [tokenizer.unk_id or 0]
               for s in sources[start : start + batch_size]]
        seqs = model.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_id)  # (N, L)
        out.extend(tokenizer.decode(row) for row in seqs)
    return out


def make_samples(task, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
    """`task.samples(...)` with dropout off; the model's train/eval modes are restored afterwards."""
    with eval_mode(model):
        return task.samples(model, tokenizer, datamodule, cfg)
