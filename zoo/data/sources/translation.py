"""A seeded Korean->English toy translation set (scored by exact match: zoo.tasks.metrics).

Sentences are generated from templates: Korean is SOV with particles (``나는 어제 학교에서 책을
읽었다``) and English is SVO with agreement and tense (``i read a book at school yesterday``), so a
model must reorder through cross-attention. The held-out test split contains only
(subject, verb, object) combinations never seen in training, built from words that all are.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from zoo.data.sources.base import PairCorpus, check_fraction, register_source, val_count

# (korean, english, agreement class): "3s" takes -s in the present and "is"/"was".
SUBJECTS = [("나는", "i", "1s"), ("너는", "you", "pl"), ("그는", "he", "3s"), ("그녀는", "she", "3s"),
            ("우리는", "we", "pl"), ("그들은", "they", "pl"), ("학생은", "the student", "3s"),
            ("선생님은", "the teacher", "3s"), ("아이는", "the child", "3s"), ("의사는", "the doctor", "3s")]
OBJECTS = {"사과를": "an apple", "빵을": "bread", "밥을": "rice", "케이크를": "a cake", "물을": "water",
           "우유를": "milk", "커피를": "coffee", "주스를": "juice", "책을": "a book",
           "신문을": "the newspaper", "편지를": "a letter", "시를": "a poem", "이야기를": "a story",
           "보고서를": "a report", "영화를": "a movie", "경기를": "the game", "뉴스를": "the news",
           "꽃을": "flowers", "음악을": "music"}


@dataclass(frozen=True)
class Verb:
    ko: tuple[str, str, str]  # present, past, future
    en: tuple[str, str, str]  # base, 3rd-person singular, past
    objects: tuple[str, ...]
    particle: str = ""  # e.g. "to" in "listen to music"


VERBS = {
    "eat": Verb(("먹는다", "먹었다", "먹을 것이다"), ("eat", "eats", "ate"),
                ("사과를", "빵을", "밥을", "케이크를")),
    "drink": Verb(("마신다", "마셨다", "마실 것이다"), ("drink", "drinks", "drank"),
                  ("물을", "우유를", "커피를", "주스를")),
    "read": Verb(("읽는다", "읽었다", "읽을 것이다"), ("read", "reads", "read"),
                 ("책을", "신문을", "편지를", "시를")),
    "write": Verb(("쓴다", "썼다", "쓸 것이다"), ("write", "writes", "wrote"),
                  ("편지를", "시를", "이야기를", "보고서를")),
    "watch": Verb(("본다", "봤다", "볼 것이다"), ("watch", "watches", "watched"),
                  ("영화를", "경기를", "뉴스를")),
    "buy": Verb(("산다", "샀다", "살 것이다"), ("buy", "buys", "bought"),
                ("사과를", "책을", "꽃을", "우유를", "케이크를")),
    "like": Verb(("좋아한다", "좋아했다", "좋아할 것이다"), ("like", "likes", "liked"),
                 ("음악을", "꽃을", "커피를", "우유를")),
    "listen": Verb(("듣는다", "들었다", "들을 것이다"), ("listen", "listens", "listened"),
                   ("음악을", "뉴스를", "이야기를"), "to"),
}
TENSES = ("present", "past", "future")
TIME_WORDS = {"present": ("매일", "every day"), "past": ("어제", "yesterday"), "future": ("내일", "tomorrow")}
PLACES = [None, ("집에서", "at home"), ("학교에서", "at school"), ("공원에서", "in the park"),
          ("카페에서", "at the cafe")]
NOUNS = [("학생", "student"), ("선생님", "teacher"), ("의사", "doctor"), ("가수", "singer"),
         ("요리사", "cook"), ("화가", "painter")]
COPULA = {
    "present": ("이다", {"1s": "am", "3s": "is", "pl": "are"}),
    "past": ("이었다", {"1s": "was", "3s": "was", "pl": "were"}),
}
PLURAL_SUBJECTS = {"we", "they"}


def _english_verb(verb: Verb, tense: str, agreement: str) -> str:
    base, third, past = verb.en
    words = {"present": third if agreement == "3s" else base, "past": past, "future": f"will {base}"}[tense]
    return f"{words} {verb.particle}".strip()


def _transitive() -> list[tuple[tuple[str, str, str], str, str]]:
    """All (combination key, korean, english) for subject-object-verb sentences."""
    out = []
    for (s_ko, s_en, agr), (v_name, verb), tense in itertools.product(SUBJECTS, VERBS.items(), TENSES):
        for obj, use_time, place in itertools.product(verb.objects, (False, True), PLACES):
            ko = [s_ko]
            en_tail = []
            if use_time:
                ko.append(TIME_WORDS[tense][0])
            if place:
                ko.append(place[0])
                en_tail.append(place[1])
            if use_time:
                en_tail.append(TIME_WORDS[tense][1])
            ko += [obj, verb.ko[TENSES.index(tense)]]
            en = [s_en, _english_verb(verb, tense, agr), OBJECTS[obj], *en_tail]
            out.append(((s_en, v_name, obj), " ".join(ko), " ".join(en)))
    return out


def _copula() -> list[tuple[tuple[str, str, str], str, str]]:
    """``나는 학생 이다`` -> ``i am a student`` (plural subjects take plural nouns)."""
    out = []
    for (s_ko, s_en, agr), (n_ko, n_en), tense in itertools.product(SUBJECTS, NOUNS, COPULA):
        if s_en == f"the {n_en}":
            continue
        ending, be = COPULA[tense]
        noun = f"{n_en}s" if s_en in PLURAL_SUBJECTS else f"{'an' if n_en[0] in 'aeiou' else 'a'} {n_en}"
        out.append(((s_en, "be", n_ko), f"{s_ko} {n_ko} {ending}", f"{s_en} {be[agr]} {noun}"))
    return out


def all_sentences() -> list[tuple[tuple[str, str, str], str, str]]:
    """Every sentence the templates can make, in a fixed order."""
    return _transitive() + _copula()


@register_source("translation_toy")
def load_translation_toy(
    *,
    n_pairs: int = 6000,
    n_test: int = 500,
    heldout_fraction: float = 0.1,
    val_fraction: float = 0.05,
    seed: int = 0,
) -> PairCorpus:
    """``n_pairs`` seen-combination pairs (train + val) and ``n_test`` pairs of unseen combinations."""
    if not 0.0 < heldout_fraction < 0.5:
        raise ValueError(f"data.heldout_fraction={heldout_fraction!r} must be in (0, 0.5)")
    check_fraction(val_fraction)
    sentences = all_sentences()
    rng = random.Random(seed)
    keys = sorted({key for key, _, _ in sentences})
    heldout = set(rng.sample(keys, max(1, round(len(keys) * heldout_fraction))))
    seen = [(ko, en) for key, ko, en in sentences if key not in heldout]
    unseen = [(ko, en) for key, ko, en in sentences if key in heldout]
    if not 2 <= n_pairs <= len(seen):
        raise ValueError(
            f"data.n_pairs={n_pairs!r} must be in [2, {len(seen)}] (sentences with seen combinations)"
        )
    if not 1 <= n_test <= len(unseen):
        raise ValueError(
            f"data.n_test={n_test!r} must be in [1, {len(unseen)}] (sentences with held-out combinations)"
        )
    rng.shuffle(seen)
    rng.shuffle(unseen)
    pairs = seen[:n_pairs]
    n_val = val_count(n_pairs, val_fraction)
    return PairCorpus(train=pairs[n_val:], val=pairs[:n_val], test=unseen[:n_test])
