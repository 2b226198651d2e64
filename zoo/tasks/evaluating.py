"""The shared part of evaluating a task on a data split: which split, its batches run through the model
(dropout off, no gradients), and the decoding options for tasks that generate. Each task's `evaluate`
(zoo/tasks/) turns these into its own metrics."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from zoo.utils import eval_mode

SPLITS = ("val", "test")


@dataclass
class EvalOptions:
    """What `Task.evaluate` reads besides model and data: at most `max_examples` examples of the split (LM:
    windows; None = all) and, for tasks that generate, zoo.generation options (`num_beams`,
    `length_penalty`, ...; `max_new_tokens` defaults to the model's max_seq_len)."""

    max_examples: int | None = None
    generation: Mapping[str, Any] = field(default_factory=dict)

    def generation_kwargs(self, model) -> dict[str, Any]:
        kwargs = {k: v for k, v in self.generation.items() if v is not None}
        kwargs.setdefault("max_new_tokens", model.config.max_seq_len)
        return kwargs


def available_splits(datamodule) -> list[str]:
    """The evaluable splits this data has (val always; test when the data source gives one)."""
    if not datamodule.datasets:
        datamodule.setup("fit")
    return [s for s in SPLITS if s in datamodule.datasets]


def resolve_split(datamodule, split: str) -> str:
    """`auto` is test when the data has a test split, else val; a named split must exist."""
    found = available_splits(datamodule)
    if split == "auto":
        return "test" if "test" in found else "val"
    if split not in found:
        raise ValueError(f"split={split}: this data has no {split!r} split; "
                         f"available: {', '.join(found)} (or auto)")
    return split


def dataset(datamodule, split: str):
    """The split's dataset (examples by index)."""
    available_splits(datamodule)
    return datamodule.datasets[split]


Batch = dict[str, torch.Tensor]


def outputs(task, model, batches: Iterable[Batch]) -> Iterator[tuple[Batch, Any]]:
    """(batch on the model's device, model output) per batch, in eval mode under inference_mode (the model's
    mode is restored afterwards)."""
    device = next(model.parameters()).device
    with eval_mode(model), torch.inference_mode():
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            yield batch, model(**task.model_inputs(batch))


def forward_batches(task, model, datamodule, split: str, max_examples: int | None = None
                    ) -> Iterator[tuple[Batch, Any]]:
    """`outputs` of the split's batches in order (its val or test dataloader), cut after `max_examples`."""

    def cut(loader: Iterable[Batch]) -> Iterator[Batch]:
        left = max_examples
        for batch in loader:
            if left is not None:
                if left <= 0:
                    return
                batch = {k: v[:left] for k, v in batch.items()}  # (B, ...) -> at most `left` rows
                left -= len(next(iter(batch.values())))
            yield batch

    return outputs(task, model, cut(getattr(datamodule, f"{split}_dataloader")()))


def first_val_logits(model, datamodule, rows: int | None = None) -> tuple[Batch, torch.Tensor]:
    """The first `rows` rows (None: all) of the first validation batch on the model's device, and the logits
    the model gives their input ids and attention mask (no gradients): what samples show."""
    batch = next(iter(datamodule.val_dataloader()))
    device = next(model.parameters()).device
    batch = {k: v[:rows].to(device) for k, v in batch.items()}
    with torch.inference_mode():
        return batch, model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def encoder_inputs(tokenizer, sources: Sequence[Sequence[int]], max_len: int) -> list[list[int]]:
    """Source token ids framed for the encoder exactly as the training data frames them
    (`tokenizer.specials.source`: T5 `x </s>`, BART `<s> x </s>`, zoo's own tokenizers `x`), cut to `max_len`.
    A source that frames to nothing (an empty text under a template-less tokenizer) becomes one unknown token,
    or the padding id where the tokenizer has no unk, since generation needs one real token per prompt."""
    specials = tokenizer.specials
    filler = specials["unk"] if specials["unk"] is not None else specials.padding_id
    return [specials.source(ids, max_len).tolist() or [filler] for ids in sources]


def generate_texts(model, tokenizer, sources: Sequence[Sequence[int]], options: EvalOptions,
                   batch_size: int) -> list[str]:
    """Decoded outputs of `model.generate` for the token ids of unframed `sources` (framed by
    `encoder_inputs` to the model's max_seq_len), `batch_size` at a time, with dropout off."""
    out: list[str] = []
    kwargs = options.generation_kwargs(model)
    with eval_mode(model):
        for start in range(0, len(sources), batch_size):
            ids = encoder_inputs(tokenizer, sources[start:start + batch_size], model.config.max_seq_len)
            seqs = model.generate(ids, eos_token_id=tokenizer.eos_id, **kwargs)  # (N, L)
            out.extend(tokenizer.decode(row) for row in seqs)
    return out
