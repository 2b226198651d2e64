"""Evaluation metrics as plain functions and accumulators, each checkable by hand: token NLL totals
(perplexity, bits per byte), BLEU and chrF (sacrebleu's corpus scores), accuracy and macro-F1. The tasks
(zoo/tasks/) say which of them they report; zoo.evaluation.run drives them over a data split."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from zoo.data import exact_match

__all__ = ["TokenNLL", "accuracy", "bleu", "chrf", "exact_match", "macro_f1"]


@dataclass
class TokenNLL:
    """Running totals of a token-level cross-entropy: summed NLL (nats), counted tokens and, for text whose
    bytes are known, the UTF-8 bytes those tokens spell (bits per byte compares models whose tokenizers
    differ: the text is the same, the token counts are not)."""

    nll: float = 0.0
    tokens: int = 0
    bytes: int = 0

    def add(self, mean_loss: torch.Tensor | float, tokens: torch.Tensor | int) -> None:
        """Add a batch given as its mean NLL over `tokens` counted positions."""
        tokens = int(tokens)
        if tokens:
            self.nll += float(mean_loss) * tokens
            self.tokens += tokens

    @property
    def loss(self) -> float:
        """Mean NLL per token (nats)."""
        return self.nll / self.tokens if self.tokens else math.nan

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    @property
    def bits_per_byte(self) -> float:
        """Total NLL in bits over the UTF-8 bytes of the text: sum(nll) / ln 2 / bytes."""
        return self.nll / math.log(2) / self.bytes if self.bytes else math.nan


def _sacrebleu():
    try:
        import sacrebleu
    except ImportError:  # a declared dependency; say how to get it instead of a bare ImportError
        raise ImportError("BLEU and chrF need sacrebleu: pip install sacrebleu") from None
    return sacrebleu


def _check_pairs(hyps: Sequence[str], refs: Sequence[str], what: str) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{what}: {len(hyps)} hypotheses but {len(refs)} references")
    if not refs:
        raise ValueError(f"{what}: no references")


def bleu(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Corpus BLEU (0-100) with sacrebleu's defaults (13a tokenisation, exponential smoothing), one
    reference per hypothesis."""
    _check_pairs(hyps, refs, "bleu")
    return float(_sacrebleu().corpus_bleu(list(hyps), [list(refs)]).score)


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Corpus chrF (0-100, character 6-grams, beta 2) with sacrebleu's defaults, one reference each."""
    _check_pairs(hyps, refs, "chrf")
    return float(_sacrebleu().corpus_chrf(list(hyps), [list(refs)]).score)


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Fraction of predictions equal to their label."""
    _check_pairs(predictions, labels, "accuracy")
    return sum(int(p) == int(y) for p, y in zip(predictions, labels, strict=True)) / len(labels)


def macro_f1(predictions: Sequence[int], labels: Sequence[int], num_classes: int) -> float:
    """Unweighted mean over all `num_classes` classes of F1 = 2 TP / (2 TP + FP + FN); a class that is
    neither predicted nor present scores 0 (scikit-learn's zero_division=0)."""
    _check_pairs(predictions, labels, "macro_f1")
    scores = []
    for c in range(num_classes):
        tp = sum(int(p) == c and int(y) == c for p, y in zip(predictions, labels, strict=True))
        fp = sum(int(p) == c and int(y) != c for p, y in zip(predictions, labels, strict=True))
        fn = sum(int(p) != c and int(y) == c for p, y in zip(predictions, labels, strict=True))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return sum(scores) / num_classes
