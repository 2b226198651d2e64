"""The metric functions against hand counts and sacrebleu itself."""

from __future__ import annotations

import math

import pytest
import sacrebleu

from zoo.tasks.metrics import TokenNLL, accuracy, bleu, chrf, exact_match, macro_f1

HYPS = ["the cat sat on the mat", "a dog barks loudly", "hello there world", "completely different"]
REFS = ["the cat sat on a mat", "a dog barks", "hello world", "nothing alike here"]


def test_bleu_and_chrf_are_sacrebleus_corpus_scores():
    assert bleu(HYPS, REFS) == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert chrf(HYPS, REFS) == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 0 < bleu(HYPS, REFS) < 100 and bleu(REFS, REFS) == pytest.approx(100)


def test_exact_match():
    assert exact_match(["i am  a student ", "he ate"], ["i am a student", "he eats"]) == 0.5
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        exact_match(["a", "b"], ["a"])


def test_exact_match_accuracy_and_macro_f1_by_hand():
    assert exact_match(["a  b", "c", "d"], ["a b", "c", "e"]) == pytest.approx(2 / 3)  # whitespace collapsed
    predicted, labels = [0, 0, 1, 2, 2, 2], [0, 1, 1, 2, 0, 2]
    assert accuracy(predicted, labels) == pytest.approx(4 / 6)
    # class 0: TP 1 FP 1 FN 1 -> 2/4; class 1: TP 1 FP 0 FN 1 -> 2/3; class 2: TP 2 FP 1 FN 0 -> 4/5;
    # class 3 is never predicted nor present -> 0
    assert macro_f1(predicted, labels, 3) == pytest.approx((1 / 2 + 2 / 3 + 4 / 5) / 3)
    assert macro_f1(predicted, labels, 4) == pytest.approx((1 / 2 + 2 / 3 + 4 / 5) / 4)


def test_token_nll_totals_by_hand():
    totals = TokenNLL()
    totals.add(2.0, 3)  # batch means weigh by their token counts
    totals.add(0.5, 1)
    totals.add(9.0, 0)  # nothing counted: nothing added
    totals.bytes = 10
    assert totals.loss == pytest.approx(6.5 / 4)
    assert totals.perplexity == pytest.approx(math.exp(6.5 / 4))
    assert totals.bits_per_byte == pytest.approx(6.5 / math.log(2) / 10)


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no references"):
        chrf([], [])
