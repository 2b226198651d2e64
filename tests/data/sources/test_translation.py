from __future__ import annotations

import pytest

from zoo.data.sources.translation import all_sentences, load_translation_toy

TOY = dict(n_pairs=3000, n_test=300)


def test_template_examples():
    pairs = {ko: en for _, ko, en in all_sentences()}
    assert pairs["나는 학생 이다"] == "i am a student"
    assert pairs["나는 사과를 먹었다"] == "i ate an apple"
    assert pairs["그는 내일 학교에서 책을 읽을 것이다"] == "he will read a book at school tomorrow"
    assert pairs["우리는 의사 이었다"] == "we were doctors"
    assert pairs["그녀는 매일 음악을 듣는다"] == "she listens to music every day"
    assert len(pairs) == len(all_sentences()) > 5000  # several thousand distinct sentences


def test_deterministic_for_a_seed():
    assert load_translation_toy(**TOY, seed=1) == load_translation_toy(**TOY, seed=1)
    assert load_translation_toy(**TOY, seed=1) != load_translation_toy(**TOY, seed=2)


def test_sizes_and_disjoint_splits():
    corpus = load_translation_toy(**TOY, val_fraction=0.1, seed=0)
    assert len(corpus.train) + len(corpus.val) == 3000 and len(corpus.test) == 300
    assert not set(corpus.train) & set(corpus.val)
    assert not (set(corpus.train) | set(corpus.val)) & set(corpus.test)


def test_test_split_has_unseen_combinations_of_seen_words():
    corpus = load_translation_toy(**TOY, seed=0)
    key_of = {(ko, en): key for key, ko, en in all_sentences()}
    train_keys = {key_of[p] for p in corpus.train + corpus.val}
    test_keys = {key_of[p] for p in corpus.test}
    assert test_keys and not train_keys & test_keys
    train_words = {w for ko, en in corpus.train for w in (ko + " " + en).split()}
    assert {w for ko, en in corpus.test for w in (ko + " " + en).split()} <= train_words


def test_bad_sizes():
    with pytest.raises(ValueError, match=r"data.n_pairs=100000 must be in \[2, \d+\]"):
        load_translation_toy(n_pairs=100_000)
    with pytest.raises(ValueError, match=r"data.heldout_fraction=0.9"):
        load_translation_toy(heldout_fraction=0.9)
