"""Metrics of the tasks, each checkable by hand: plain functions and accumulators (token NLL totals for
perplexity and bits per byte, BLEU and chrF as sacrebleu's corpus scores, accuracy, macro-F1, exact match,
seqeval's entity scores, SQuAD v1.1 exact match and F1) and the torchmetrics `Accuracy` logged at validation.
Each task (zoo/tasks/) says which it reports."""

from __future__ import annotations

import importlib
import math
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torchmetrics import Metric

from zoo.utils import IGNORE_INDEX


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


def _module(name: str, hint: str):
    """The module `name`, imported; a missing one is an ImportError saying how to get it (`hint`)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ImportError(hint) from None


def _sacrebleu():
    return _module("sacrebleu", "BLEU and chrF need sacrebleu: pip install sacrebleu")


def _check_pairs(hyps: Sequence, refs: Sequence, what: str, outputs: str = "hypotheses") -> None:
    """As many `outputs` as references, and at least one; else a ValueError naming `what`."""
    if len(hyps) != len(refs):
        raise ValueError(f"{what}: {len(hyps)} {outputs} but {len(refs)} references")
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


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of predictions equal to their reference after collapsing whitespace."""
    _check_pairs(predictions, references, "exact_match", "predictions")
    pairs = zip(predictions, references, strict=True)
    return sum(" ".join(p.split()) == " ".join(r.split()) for p, r in pairs) / len(references)


# ------------------------------------------------------------------------ token classification (seqeval)


def _seqeval_metrics():
    return _module("seqeval.metrics", "entity precision/recall/F1 (task=token_classification) need seqeval: "
                   "pip install 'zoo[ner]' (or pip install seqeval)")


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level micro precision, recall and F1 of IOB2 tag sequences as seqeval computes them in its
    default (conlleval-compatible) mode, and seqeval's tag accuracy; one tag list per sentence, gold first.
    No predicted (or no gold) entity scores 0, as seqeval does, without its warning."""
    _check_pairs(predicted, gold, "entity_scores")
    for i, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"entity_scores: sentence {i} has {len(g)} gold tags but {len(p)} predicted")
    m = _seqeval_metrics()
    gold, predicted = [list(s) for s in gold], [list(s) for s in predicted]
    return {"precision": float(m.precision_score(gold, predicted, zero_division=0)),
            "recall": float(m.recall_score(gold, predicted, zero_division=0)),
            "f1": float(m.f1_score(gold, predicted, zero_division=0)),
            "accuracy": float(m.accuracy_score(gold, predicted))}


# -------------------------------------------------------------------- extractive QA (SQuAD v1.1 script)

PUNCTUATION = frozenset(string.punctuation)  # the script's `exclude`: ASCII punctuation only


def squad_normalize(text: str) -> str:
    """The SQuAD v1.1 script's normalize_answer: lower case, punctuation removed, the articles a/an/the
    removed, whitespace collapsed (in that order)."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(prediction: str, gold: str) -> float:
    """The script's f1_score: bag-of-words overlap of the normalized texts (0 when nothing is shared)."""
    pred, ref = squad_normalize(prediction).split(), squad_normalize(gold).split()
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


References = Sequence[str | Sequence[str]]  # one gold answer or a list of them per example


def _golds(references: References, predictions: Sequence[str], what: str) -> list[tuple[str, list[str]]]:
    """Each prediction with its list of gold answers (a plain string reference is one answer)."""
    _check_pairs(predictions, references, what)
    golds = [[r] if isinstance(r, str) else list(r) for r in references]
    empty = next((i for i, g in enumerate(golds) if not g), None)
    if empty is not None:
        raise ValueError(f"{what}: reference {empty} has no gold answer")
    return list(zip(predictions, golds, strict=True))


def squad_exact_match(predictions: Sequence[str], references: References) -> float:
    """SQuAD v1.1 exact match (0-100): the share of predictions whose normalized text equals that of any of
    their gold answers (a reference is one answer or a list of them)."""
    pairs = _golds(references, predictions, "squad_exact_match")
    hits = sum(max(squad_normalize(p) == squad_normalize(g) for g in gs) for p, gs in pairs)
    return 100.0 * hits / len(pairs)


def squad_f1(predictions: Sequence[str], references: References) -> float:
    """SQuAD v1.1 F1 (0-100): the mean over examples of the best token-overlap F1 against any gold answer."""
    pairs = _golds(references, predictions, "squad_f1")
    return 100.0 * sum(max(_token_f1(p, g) for g in gs) for p, gs in pairs) / len(pairs)


def squad_scores(predictions: Sequence[str], references: References) -> dict[str, float]:
    """{"exact_match", "f1"} as the SQuAD v1.1 evaluation script reports them (percent)."""
    return {"exact_match": squad_exact_match(predictions, references),
            "f1": squad_f1(predictions, references)}


# ---------------------------------------------------------------------- validation (torchmetrics)


class Accuracy(Metric):
    """Fraction of labelled positions whose arg-max is the label: one per example (classification: labels
    (B,), logits (B, num_labels)) or one per tagged token (labels (B, T) with -100 where none, logits
    (B, T, num_labels))."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, out, batch: Mapping[str, torch.Tensor]) -> None:
        labels = batch["labels"]
        counted = labels != IGNORE_INDEX
        self.correct += ((out.logits.argmax(-1) == labels) & counted).sum()
        self.total += counted.sum()

    def compute(self) -> torch.Tensor:
        return self.correct / self.total
