"""Evaluation metrics as plain functions and accumulators, each checkable by hand: token NLL totals
(perplexity, bits per byte), BLEU and chrF (sacrebleu's corpus scores), accuracy and macro-F1. The tasks
(zoo/tasks/) say which of them they report; zoo.evaluation.run drives them over a data split."""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from zoo.data import exact_match

__all__ = ["TokenNLL", "accuracy", "bleu", "chrf", "entity_scores", "exact_match", "macro_f1", "squad_exact_match",
           "squad_f1", "squad_normalize", "squad_scores"]


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


# ------------------------------------------------------------------------ token classification (seqeval)


def _seqeval_metrics():
    try:
        import seqeval.metrics
    except ImportError:  # an optional extra: say how to get it instead of a bare ImportError
        raise ImportError("entity precision/recall/F1 (task=token_classification) need seqeval: "
                          "pip install 'zoo[ner]' (or pip install seqeval)") from None
    return seqeval.metrics


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


def _golds(references: Sequence[str | Sequence[str]], predictions: Sequence[str], what: str) -> list[list[str]]:
    """Each reference as its list of gold answers (a plain string is one answer)."""
    _check_pairs(predictions, references, what)
    golds = [[r] if isinstance(r, str) else list(r) for r in references]
    empty = next((i for i, g in enumerate(golds) if not g), None)
    if empty is not None:
        raise ValueError(f"{what}: reference {empty} has no gold answer")
    return golds


def squad_exact_match(predictions: Sequence[str], references: Sequence[str | Sequence[str]]) -> float:
    """SQuAD v1.1 exact match (0-100): the share of predictions whose normalized text equals that of any of
    their gold answers (a reference is one answer or a list of them)."""
    golds = _golds(references, predictions, "squad_exact_match")
    hits = sum(max(squad_normalize(p) == squad_normalize(g) for g in gs) for p, gs in zip(predictions, golds, strict=True))
    return 100.0 * hits / len(golds)


def squad_f1(predictions: Sequence[str], references: Sequence[str | Sequence[str]]) -> float:
    """SQuAD v1.1 F1 (0-100): the mean over examples of the best token-overlap F1 against any gold answer."""
    golds = _golds(references, predictions, "squad_f1")
    return 100.0 * sum(max(_token_f1(p, g) for g in gs) for p, gs in zip(predictions, golds, strict=True)) / len(golds)


def squad_scores(predictions: Sequence[str], references: Sequence[str | Sequence[str]]) -> dict[str, float]:
    """{"exact_match", "f1"} as the SQuAD v1.1 evaluation script reports them (percent)."""
    return {"exact_match": squad_exact_match(predictions, references), "f1": squad_f1(predictions, references)}
