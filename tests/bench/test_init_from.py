"""bench/bench_init_from.py: the synthetic labels are what the text says, and the --quick run trains both
sides (zoo's train.py init_from and the transformers loop) and scores them on the same test texts."""

from __future__ import annotations

import random

import pytest

from bench.bench_init_from import LABELS, NEGATIVE, POSITIVE, make_splits, run, sentence


def label_read_from(text: str) -> str:
    """The label recomputed from the words alone: +1 / -1 per sentiment word, flipped right after "not"."""
    words = text.split()
    score = sum((1 if w in POSITIVE else -1) * (-1 if i and words[i - 1] == "not" else 1)
                for i, w in enumerate(words) if w in POSITIVE or w in NEGATIVE)
    assert score != 0
    return LABELS[score > 0]


def test_labels_are_the_sign_of_the_negated_sentiment_sum():
    rng = random.Random(0)
    rows = [sentence(rng) for _ in range(2000)]
    assert all(label == label_read_from(text) for text, label in rows)
    assert 0.4 < sum(label == "positive" for _, label in rows) / len(rows) < 0.6
    assert sum("not" in text.split() for text, _ in rows) > 400  # negation is common enough to matter


def test_splits_have_the_stated_sizes():
    from bench.bench_init_from import QUICK

    splits = make_splits(QUICK)
    assert [len(splits[k]) for k in ("train", "validation", "test")] == [QUICK.train, QUICK.val, QUICK.test]


@pytest.mark.e2e
def test_quick_run_trains_and_scores_both_sides():
    section = run(quick=True)
    scores = section.data["scores"]
    assert set(scores) == {"zoo train.py init_from", "transformers fine-tune",
                           "transformers, same config from scratch"}
    assert all(len(v) == 1 and 0.0 <= v[0] <= 1.0 for v in scores.values())
    assert all(f"| {side} |" in section.table for side in scores)
    assert any(note.endswith("transformers' tokenizer call): yes.") for note in section.notes)
    assert section.goals and section.goals[0][2] == -0.02
