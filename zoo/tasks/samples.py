"""What a trained model produces at the end of fit, shown as a table: each task's `samples` method
(zoo/tasks/) fills a SampleReport; `translate` is the greedy decoding translation samples and the
exact-match callback share. Decoding goes through `zoo.generation`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zoo.tasks.evaluating import EvalOptions, generate_texts
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


def translate(model, tokenizer, sources: Sequence[str], *, max_new_tokens: int,
              batch_size: int = 64) -> list[str]:
    """Greedy translations of `sources` (decoded without special tokens); the sources are framed as in
    training by the same path evaluation takes (`zoo.tasks.evaluating.generate_texts`)."""
    ids = [tokenizer.encode(s) for s in sources]
    options = EvalOptions(generation={"max_new_tokens": max_new_tokens})
    return generate_texts(model, tokenizer, ids, options, batch_size)


def make_samples(task, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
    """`task.samples(...)` with dropout off; the model's train/eval modes are restored afterwards."""
    with eval_mode(model):
        return task.samples(model, tokenizer, datamodule, cfg)
