"""What a trained model produces, per task: continuations (LM), translations with exact-match (seq2seq),
filled masks (MLM) and predicted labels (classification). Decoding goes through `zoo.generation`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from zoo.registry import Registry

SAMPLERS: Registry = Registry("sample task")


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
        ids = [tokenizer.encode(s)[:max_src] or [tokenizer.unk_id] for s in sources[start : start + batch_size]]
        seqs = model.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_id)  # (N, L)
        out.extend(tokenizer.decode(row) for row in seqs)
    return out


@SAMPLERS.register("lm")
def lm_samples(model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
    samples = []
    for i, prompt in enumerate(cfg["prompts"]):
        ids = tokenizer.encode(prompt) or [tokenizer.eos_id]
        seq = model.generate(
            [ids], max_new_tokens=cfg["max_new_tokens"], do_sample=True, temperature=cfg["temperature"],
            top_k=cfg["top_k"], seed=cfg["seed"] + i, eos_token_id=[],
        )[0]
        samples.append(Sample(prompt, tokenizer.decode(seq[len(ids):] if len(seq) > len(ids) else seq)))
    return SampleReport(samples, {})


@SAMPLERS.register("seq2seq")
def seq2seq_samples(model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
    """Translate the held-out test pairs (unseen combinations) and report their exact match."""
    from zoo.data import exact_match

    pairs = list(getattr(datamodule, "test_pairs", []))[: cfg["max_examples"]]
    if not pairs:
        return SampleReport([], {})
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    hyps = translate(model, tokenizer, sources, max_new_tokens=model.config.max_seq_len)
    shown = [Sample(s, h, r) for s, h, r in zip(sources, hyps, refs, strict=True)][: cfg["num_shown"]]
    return SampleReport(shown, {"test/exact_match": exact_match(hyps, refs)})


@SAMPLERS.register("mlm")
def mlm_samples(model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
    """Fill the masked positions of a few validation windows with the model's top guess."""
    batch = next(iter(datamodule.val_dataloader()))
    samples = []
    with torch.inference_mode():
        model.eval()
        device = next(model.parameters()).device
        ids = batch["input_ids"][: cfg["num_shown"]].to(device)
        logits = model(ids, attention_mask=batch["attention_mask"][: len(ids)].to(device)).logits  # (B, T, V)
        labels = batch["labels"][: len(ids)].to(device)
        picked = labels != -100
        filled = torch.where(picked, logits.argmax(-1), ids)
        truth = torch.where(picked, labels, ids)
    accuracy = float((filled[picked] == labels[picked]).float().mean()) if picked.any() else 0.0
    for row in range(len(ids)):
        window = slice(0, min(48, ids.shape[1]))
        samples.append(Sample(
            tokenizer.decode(ids[row, window], skip_special_tokens=False),
            tokenizer.decode(filled[row, window]), tokenizer.decode(truth[row, window]),
        ))
    return SampleReport(samples, {"sample/masked_token_accuracy": accuracy})


@SAMPLERS.register("classification")
def classification_samples(model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
    batch = next(iter(datamodule.val_dataloader()))
    names = tokenizer.label_names or []
    with torch.inference_mode():
        model.eval()
        device = next(model.parameters()).device
        logits = model(batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)).logits
    preds = logits.argmax(-1).tolist()
    samples = [
        Sample(tokenizer.decode(batch["input_ids"][i])[:200], names[p] if p < len(names) else str(p),
               names[int(y)] if int(y) < len(names) else str(int(y)))
        for i, (p, y) in enumerate(zip(preds, batch["labels"].tolist(), strict=True))
    ][: cfg["num_shown"]]
    return SampleReport(samples, {})


def make_samples(task: str, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
    sampler: Callable[..., SampleReport] = SAMPLERS.get(task)
    was_training = model.training
    try:
        return sampler(model, tokenizer, datamodule, cfg)
    finally:
        model.train(was_training)
