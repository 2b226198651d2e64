from __future__ import annotations

import json
import time

import pytest
from tokenizers import Tokenizer, models

from zoo.tokenizers import (
    SPECIAL_TOKENS,
    TOKENIZERS,
    ZooTokenizer,
    build_tokenizer,
    load_tokenizer,
    register_tokenizer,
    validate_tokenizer_cfg,
)
from zoo.tokenizers.trained import chunk_text

TRAIN = ["def f(x):\n    return x + 1\n", "나는 사과를 먹었다\n", "hello world, hello zoo 🦓\n"] * 20
HARD = [
    "나는 학생 이다 → i am a student",
    "emoji 🦓🧪👩‍👩‍👧 and flags 🇰🇷",
    "def f(x):\n\tif x:\n\t\treturn {'a': [1, 2]}  # comment\r\n",
    "   leading and    inner   runs   \n\n\n  \t trailing  ",
    "literal specials <pad><bos><eos><unk><mask> stay text",
    "\x00\x7f control bytes \u200b zero-width",
    "",
]


@pytest.fixture(scope="module")
def bpe() -> ZooTokenizer:
    return build_tokenizer({"name": "bpe", "vocab_size": 300}, TRAIN)


@pytest.mark.parametrize("text", HARD)
def test_bpe_round_trips_any_utf8(bpe, text):
    ids = bpe.encode(text)
    assert all(i >= len(SPECIAL_TOKENS) for i in ids)  # text never produces special ids
    assert bpe.decode(ids) == text


def test_special_ids_are_fixed(bpe):
    assert (bpe.pad_id, bpe.bos_id, bpe.eos_id, bpe.unk_id, bpe.mask_id) == (0, 1, 2, 3, 4)
    assert [bpe.hf.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert bpe.decode([1, *bpe.encode("hi"), 2, 0]) == "hi"
    assert bpe.decode([1, *bpe.encode("hi")], skip_special_tokens=False) == "<bos>hi"


def test_bpe_learns_merges(bpe):
    assert bpe.vocab_size == 300
    assert len(bpe.encode("hello world")) < len(b"hello world")


def test_save_load_round_trip(bpe, tmp_path):
    bpe.save(tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    assert loaded.kind == "bpe" and loaded.vocab_size == bpe.vocab_size
    for text in HARD:
        assert loaded.encode(text) == bpe.encode(text)
    assert load_tokenizer(tmp_path / "tok" / "tokenizer.json").encode("zoo") == bpe.encode("zoo")


def test_char_tokenizer(tmp_path):
    tok = build_tokenizer({"name": "char"}, ["ab 가\n"])
    assert tok.vocab_size == 5 + 5
    assert tok.encode("가 b\n") == [tok.hf.token_to_id(c) for c in "가 b\n"]
    assert tok.decode(tok.encode("ab 가\n ba")) == "ab 가\n ba"
    assert tok.encode("z<pd>") == [tok.unk_id] * 5  # unseen characters
    a = tok.hf.token_to_id("a")
    assert tok.encode("<pad>") == [3, 3, a, 3, 3]  # literal specials are text, never id 0
    tok.save(tmp_path / "c")
    assert load_tokenizer(tmp_path / "c").encode("ba") == tok.encode("ba")


def test_file_tokenizer(bpe, tmp_path):
    bpe.save(tmp_path / "tok")
    tok = build_tokenizer({"name": "file", "path": str(tmp_path / "tok")}, [])
    assert tok.encode("hello") == bpe.encode("hello")


def test_file_tokenizer_missing_and_corrupt(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        build_tokenizer({"name": "file", "path": str(tmp_path / "nope.json")}, [])
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": ')
    with pytest.raises(ValueError, match="corrupt tokenizer file .*tokenizer.json"):
        load_tokenizer(bad)


def test_file_tokenizer_without_fixed_specials(tmp_path):
    hf = Tokenizer(models.WordLevel({"<unk>": 0, "<pad>": 1}, unk_token="<unk>"))
    path = tmp_path / "other.json"
    hf.save(str(path))
    with pytest.raises(ValueError, match=r"<pad>: expected id 0, found 1"):
        load_tokenizer(path)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (
            {"name": "bpe", "vocab_size": 100},
            r"vocab_size=100 .*byte alphabet \(256\) \+ 5 special tokens = 261",
        ),
        ({"name": "bpe", "vocab_size": 4096, "merges": 3},
         r"Unknown key 'tokenizer.merges' \(tokenizer=bpe\). Allowed tokenizer keys: min_frequency, name, "
         r"train_bytes, vocab_size"),
        ({"name": "bpe", "vocab_size": "4k"}, r"tokenizer.vocab_size must be an integer >= 261, got '4k'"),
        ({"name": "char", "vocab_size": 5}, r"tokenizer.vocab_size must be null or an integer >= 6, got 5"),
        ({"name": "wordpiece"}, r"tokenizer.name: Unknown tokenizer 'wordpiece'. Allowed: bpe, char, file."),
        ({"name": "chars"}, r"tokenizer.name: Unknown tokenizer 'chars'. Did you mean 'char'\?"),
        ({"name": "file"}, "tokenizer=file needs tokenizer.path"),
    ],
)
def test_bad_tokenizer_cfg(cfg, match):
    with pytest.raises(ValueError, match=match):
        validate_tokenizer_cfg(cfg)


def test_char_vocab_smaller_than_alphabet():
    with pytest.raises(ValueError, match=r"vocab_size=7 is smaller than the alphabet \(4 characters\) \+ 5"):
        build_tokenizer({"name": "char", "vocab_size": 7}, ["abcd"])


def test_chunk_text_is_lossless_and_bounded():
    text = ("x" * 3000) + "\n" + ("line\n" * 500) + "y" * 10
    pieces = list(chunk_text(text, max_chars=1024))
    assert "".join(pieces) == text
    assert max(map(len, pieces)) <= 1024
    assert pieces[2].endswith("\n")  # cut after a newline when one is near


def test_enormous_line_does_not_hang():
    line = "".join("abcdefgh"[(i * 7919) % 8] for i in range(1_000_000))  # 1 MB, no whitespace
    start = time.perf_counter()
    tok = build_tokenizer({"name": "bpe", "vocab_size": 300}, [line])
    assert tok.decode(tok.encode_long(line)) == line
    assert time.perf_counter() - start < 30  # unchunked this takes minutes


def test_registry_names():
    assert sorted(TOKENIZERS) == ["bpe", "char", "file", "hf"]


def test_registering_a_taken_name_raises():
    with pytest.raises(ValueError, match="tokenizer 'char' is already registered"):
        register_tokenizer("char")(lambda texts: None)
    assert TOKENIZERS.get("char").__name__ == "train_char"


def test_saved_metadata(bpe, tmp_path):
    bpe.label_names = None
    bpe.save(tmp_path / "t")
    meta = json.loads((tmp_path / "t" / "zoo_tokenizer.json").read_text())
    assert meta["special_tokens"] == {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3, "<mask>": 4}
    assert not (tmp_path / "t" / "labels.json").exists()
