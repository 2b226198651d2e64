"""Long documents cut into windows and tiled back (zoo.tokenizers.tiling): where a piece ends (worked by
hand), a cut the windows either side disagree on is mended (checked against one call on the whole text, and
shown to be needed), and past ``Cuts.longest`` the hard cut encodes every character once. The parity of every
tokenizer kind with transformers on long documents is in tests/tokenizers/test_tokenizer_parity.py."""

from __future__ import annotations

import pytest

import zoo.tokenizers.tiling as tiling
from zoo.tokenizers import build_tokenizer
from zoo.tokenizers.tiling import Cuts, Window, encode_texts, piece_end, windows

TEN = Cuts(piece=10, context=2, longest=30)


@pytest.mark.parametrize("text, start, final, end", [
    ("abcdefg hij klmnop", 0, True, 7),  # the last whitespace run starting in the second half, [5, 10)
    ("abcd efgh,ijklmnopqrstu", 0, True, 9),  # none starts there: before the last punctuation there
    ("ab  cdefghij  kl", 0, True, 12),  # neither: the piece grows to the first such place after it
    ("  ab      cdefgh", 0, True, 16),  # a whitespace run is not cut inside; the rest is short enough
    ("x" * 40, 0, True, 30),  # nothing for `longest` characters: cut there
    ("abcdefg", 0, True, 7),  # the whole rest fits in a piece
    ("abcdefghijk", 0, False, None),  # more text follows and there is too little to decide
    ("abcdefg hij klm", 0, False, 7),  # enough for the second half and the cut's context
    ("abcdefghijkl m", 0, False, 12),  # found past the piece, with its context read
    ("abcdefghijklmn", 0, False, None),  # nothing yet: a cut may still come
    ("zzz abcdefg hij klmnop", 4, True, 11),  # from `start`
])
def test_where_a_piece_ends(text, start, final, end):
    assert piece_end(text, start, final, TEN) == end


def test_a_cut_is_not_put_before_a_long_word_when_another_will_do():
    """Context 6: a word of 3+ characters in the 6 after a cut is long. Of the run starts 10, 12, 14, 16, 18
    in the second half, 18 has "ghi" after it and 16 is the last without one; with none such, the last run
    start."""
    cuts = Cuts(piece=20, context=6, longest=60)
    assert piece_end("aaaaaaaaaa b c d e f ghijklmnopqrstuvwxyz", 0, True, cuts) == 16
    assert piece_end("aaaaaaaaaa bcd efg hij klmnopqrstuvwxyz", 0, True, cuts) == 18


def test_windows_hold_their_piece_and_context():
    text = "abcdefg hij klmnop"
    assert list(windows([text], TEN)) == [Window("abcdefg h", 0, 7, 0), Window("fg hij klmnop", 2, 13, 5)]
    assert list(windows(["abc", "defg h", "ij klmnop"], TEN)) == list(windows([text], TEN))
    assert list(windows([""], TEN)) == [] and list(windows(["ab"], TEN)) == [Window("ab", 0, 2, 0)]


def test_cuts_are_checked():
    with pytest.raises(ValueError,
                       match=r"Cuts\(piece=1, context=2, longest=30\): need 2 <= piece <= longest"):
        Cuts(piece=1, context=2, longest=30)
    with pytest.raises(ValueError, match="context >= 0"):
        Cuts(context=-1)


@pytest.fixture(scope="module")
def runs_bpe():
    """Byte-level BPE with merges of long '=' and '-' runs and of repeated words (what a cut inside them
    changes)."""
    return build_tokenizer({"name": "bpe", "vocab_size": 300, "min_frequency": 2},
                           ["=" * 64 + " zebrazebrazebra zebra " * 10 + "-" * 40] * 20)


RUNS = [("=" * 37 + "abc") * 20 + " x " + ("-" * 23 + "de ") * 10, "zebra" * 200 + " " + "=" * 301]
SMALL = Cuts(piece=64, context=8, longest=4000)


class Counting(tiling.Tiler):
    """A Tiler that remembers itself, to read its counts."""

    made: list[tiling.Tiler] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        Counting.made.append(self)


def test_a_cut_the_windows_disagree_on_is_mended(runs_bpe, monkeypatch):
    """Cut inside a run of '=' or a 1,000-character word, a small window's context is too short: the two
    windows disagree near the cut, and the two pieces are encoded again as one. The ids equal one call on the
    whole text; without the check they do not."""
    monkeypatch.setattr(tiling, "Tiler", Counting)
    whole = [runs_bpe.encode(text) for text in RUNS]
    assert encode_texts(runs_bpe.hf, RUNS, SMALL) == whole
    assert Counting.made[-1].joins > 0 and Counting.made[-1].hard_cuts == 0
    monkeypatch.setattr(tiling, "agree", lambda *args: True)
    unchecked = encode_texts(runs_bpe.hf, RUNS, SMALL)
    assert [ids != want for ids, want in zip(unchecked, whole, strict=True)] == [True, True]


def test_past_the_longest_piece_a_cut_is_hard_and_every_character_is_encoded_once(runs_bpe, monkeypatch):
    """5,000 '=' with pieces of at most 4,000 characters: no window can hold the run, so one cut encodes each
    side without the other: the ids decode to the text (nothing lost or doubled), and that cut is counted."""
    monkeypatch.setattr(tiling, "Tiler", Counting)
    text = "zebra" * 20 + "=" * 5000
    (ids,) = encode_texts(runs_bpe.hf, [text], SMALL)
    assert runs_bpe.decode(ids) == text and Counting.made[-1].hard_cuts == 1


def test_short_and_empty_texts_are_one_call(runs_bpe):
    texts = ["", "a", "zebra = zebra", "x" * 10]
    assert encode_texts(runs_bpe.hf, texts, TEN) == [runs_bpe.encode(text) for text in texts]
