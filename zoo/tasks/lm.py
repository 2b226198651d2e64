"""Causal language modelling: a decoder predicts each next token of text windows; samples continue
the configured prompts. Batches carry `targets`, the next token of every input position (windows of
max_seq_len + 1 tokens), so all max_seq_len positions are trained; the task computes the loss without the
shift that the model's own `labels=` path applies."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from zoo.data.datamodules import LMDataModule
from zoo.data.pretokenize import bytes_name
from zoo.modules.checkpointing import chunked_cross_entropy
from zoo.modules.heads import lm_loss
from zoo.tasks.base import StreamTask, register
from zoo.tasks.evaluating import EvalOptions, dataset, forward_batches
from zoo.tasks.metrics import TokenNLL
from zoo.tasks.samples import Sample, SampleReport
from zoo.utils import IGNORE_INDEX


@register
class LanguageModelling(StreamTask):
    name = "lm"
    archs = ("decoder", "mlp_lm")
    builtin_data = "stdlib_text"
    chunked_loss = True
    next_tokens = True

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> LMDataModule:
        streams = self.streams(entry)
        token_bytes = {split: entry.arrays[name] for split in streams  # kept for the scored splits
                       if (name := bytes_name(f"{split}.tokens")) in entry.arrays}
        return LMDataModule(entry.tokenizer, streams, blocks_per_epoch=loader.get("blocks_per_epoch"),
                            shards=loader.get("shards"), token_bytes=token_bytes, **common)

    def model_inputs(self, batch: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """Everything but `targets` (the model would shift `labels`; the targets are shifted already)."""
        return {k: v for k, v in batch.items() if k != "targets"}

    def counted_labels(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Every target that is not padding: max_seq_len per full window."""
        return (batch["targets"] != IGNORE_INDEX).sum()

    def loss(self, out, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Mean next-token cross-entropy: logits at position t against targets[t] (no further shift)."""
        return lm_loss(out.logits, batch["targets"], shift=False)

    def next_token_targets(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """`targets`: the batch carries them shifted already."""
        return batch["targets"]

    def loss_from_hidden(self, hidden, head, batch: Mapping[str, torch.Tensor],
                         chunk_size: int) -> torch.Tensor:
        """`loss` without the (B, T, V) logits: hidden (B, T, C) against targets, chunk by chunk."""
        return chunked_cross_entropy(hidden, head, batch["targets"], chunk_size)

    def evaluate(self, model, tokenizer, datamodule, split: str, options: EvalOptions) -> dict[str, float]:
        """Perplexity = exp(mean next-token NLL) over the split's windows (every token after the first is a
        target once; the last window is short), and bits per byte: the summed NLL in bits over the UTF-8 bytes
        of source text the scored targets spell (`<unk>` its character's bytes; special tokens such as <eos>
        none of their own). NaN without the split's bytes per token (a data module built by hand)."""
        windows = dataset(datamodule, split)
        counts = datamodule.token_bytes.get(split)
        nll, seen = TokenNLL(), 0
        for batch, out in forward_batches(self, model, datamodule, split, options.max_examples):
            nll.add(self.loss(out, batch), self.counted_labels(batch))
            for row in batch["targets"].cpu().numpy():  # (T,) per window, in window order
                start, stop = windows.target_span(seen)
                seen += 1
                if counts is not None:
                    nll.bytes += int(counts[start:stop][row[: stop - start] != IGNORE_INDEX].sum())
        return {"loss": nll.loss, "perplexity": nll.perplexity, "bits_per_byte": nll.bits_per_byte,
                "tokens": nll.tokens, "bytes": nll.bytes if counts is not None else math.nan, "windows": seen}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Sampled continuations of `cfg["prompts"]` (seeded per prompt)."""
        samples = []
        for i, prompt in enumerate(cfg["prompts"]):
            ids = tokenizer.encode(prompt) or [tokenizer.eos_id]
            seq = model.generate(
                [ids], max_new_tokens=cfg["max_new_tokens"], do_sample=True, temperature=cfg["temperature"],
                top_k=cfg["top_k"], seed=cfg["seed"] + i, eos_token_id=[],
            )[0]
            samples.append(Sample(prompt, tokenizer.decode(seq[len(ids):] if len(seq) > len(ids) else seq)))
        return SampleReport(samples, {})
