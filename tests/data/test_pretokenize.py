"""Streaming pre-tokenisation against one tokenizer call on each whole document and the in-memory encoder, the
file reader's splits and checks, the bounded tokenizer sample, and an interrupted build."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from zoo.data.cache import RaggedIds
from zoo.data.documents import FileSpan, FileSpans, TextList, file_spans
from zoo.data.pretokenize import encode_documents, pretokenize
from zoo.data.sources.stdlib import load_stdlib_text
from zoo.tasks import build_data
from zoo.tokenizers import build_tokenizer
from zoo.tokenizers.tiling import CUTS, Cuts, windows

from .conftest import SMALL_BPE

KW = dict(max_seq_len=16, batch_size=4, seed=0)


@pytest.fixture(scope="module")
def texts():
    return load_stdlib_text(max_bytes=120_000).train


@pytest.fixture(scope="module")
def tok(texts):
    return build_tokenizer(SMALL_BPE, texts)


def mixed_text(n_lines: int, seed: int) -> str:
    """Lines of mixed length and script (ASCII, Korean, emoji), some longer than a piece, no newline at the
    end."""
    rng = random.Random(seed)
    words = ["def", "x", "나는", "사과를", "🙂", "return", "a" * 700, "\t", "  "]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 40))) for _ in range(n_lines)]
    return "\n".join(lines) + "tail without newline" + "b" * 3000


SMALL_CUTS = Cuts(piece=300, context=40, longest=1200)  # many cuts in a short text


@pytest.mark.parametrize("cuts", [CUTS, SMALL_CUTS], ids=["default", "small"])
@pytest.mark.parametrize("block", [1, 7, 500, 1024, 1025, 5000])
def test_windows_from_blocks_equal_windows_of_the_whole(block, cuts):
    text = mixed_text(200, seed=block)
    blocks = [text[i : i + block] for i in range(0, len(text), block)]
    whole = list(windows([text], cuts))
    assert list(windows(blocks, cuts)) == whole
    assert "".join(w.piece for w in whole) == text and len(whole) > 1  # the pieces tile the text
    for w in whole:  # each window is the document's text around its piece, with the context it has room for
        assert w.text == text[w.at : w.at + len(w.text)] and 0 < len(w.piece) <= cuts.longest
        assert (w.lo == min(cuts.context, w.start)
                and len(w.text) - w.hi == min(cuts.context, len(text) - w.end))


def read_ragged(folder, name, dtype):
    return RaggedIds.load(folder, name, np.dtype(dtype))


def test_shards_equal_in_memory_encoding_token_for_token(tmp_path, texts, tok):
    """... and one tokenizer call on each whole document (the windows' cuts leave no trace)."""
    docs = [*texts[:30], mixed_text(50, seed=1), "", "x"]
    n = pretokenize(tok, TextList(docs), tmp_path, "train.tokens", append_eos=True, batch_chars=20_000)
    streamed = read_ragged(tmp_path, "train.tokens", "uint16")
    reference = encode_documents(tok, docs, append_eos=True)  # the in-memory encoder, one call for all
    assert n == len(reference.ids) == len(streamed.ids)
    np.testing.assert_array_equal(streamed.offsets, reference.offsets)
    np.testing.assert_array_equal(streamed.ids, reference.ids)
    # and against the tokenizer itself, document by document (small batches cut documents across batches)
    assert max(map(len, docs)) > 4 * CUTS.piece
    for i, doc in enumerate(docs):
        assert streamed[i].tolist() == tok.encode(doc) + [tok.eos_id] == tok.encode_long(doc) + [tok.eos_id]


def test_file_spans_stream_in_blocks_and_equal_the_in_memory_encoding(tmp_path, tok, monkeypatch):
    monkeypatch.setattr("zoo.data.documents.READ_BYTES", 333)  # many reads, cutting UTF-8 characters apart
    text = "\ufeff" + mixed_text(300, seed=2)
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    train, val = file_spans([path], val_fraction=0.1)
    whole = "".join(train[0].text()) + "".join(val[0].text())
    assert whole == text.removeprefix("\ufeff")
    assert train[0].end == val[0].start and "".join(train[0].text()).endswith("\n")  # cut after a newline
    out = tmp_path / "out"
    out.mkdir()
    pretokenize(tok, FileSpans(tuple(train)), out, "t", append_eos=True, batch_chars=5_000)
    reference = encode_documents(tok, ["".join(train[0].text())], append_eos=True)
    np.testing.assert_array_equal(read_ragged(out, "t", "uint16").ids, reference.ids)


def test_bad_utf8_and_binary_name_the_byte_offset(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"hello\n" * 100 + b"\xff\xfe" + b"more\n" * 100)
    with pytest.raises(ValueError, match=r"bad.txt: not valid UTF-8 at byte offset 600"):
        list(FileSpan(bad, 0, bad.stat().st_size).text())
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"abc" * 10 + b"\x00")
    with pytest.raises(ValueError, match=r"bin.txt: looks binary \(NUL byte at byte offset 30\)"):
        list(FileSpan(binary, 0, 31).text())


def test_bad_file_fails_before_the_tokenizer_trains(tmp_path, cache_dir, monkeypatch):
    (tmp_path / "a.txt").write_text("fine text\n" * 50)
    (tmp_path / "b.txt").write_bytes(b"ok\n" * 50 + b"\xc3\x28" + b"ok\n" * 5)
    monkeypatch.setattr("zoo.data.build.build_tokenizer", lambda *a, **k: pytest.fail("tokenizer trained"))
    with pytest.raises(ValueError, match=r"b.txt: not valid UTF-8 at byte offset 150"):
        build_data({"name": "text", "files": str(tmp_path / "*.txt")}, SMALL_BPE, task="lm",
                   cache_dir=cache_dir, **KW)


def test_sample_is_bounded_seeded_and_whole_when_it_fits(tmp_path, texts, monkeypatch):
    monkeypatch.setattr("zoo.data.documents.SAMPLE_BLOCK", 4096)  # many blocks in a small corpus
    docs = TextList(texts)
    total = docs.nbytes
    assert docs.sample(None, 0) == docs.sample(total, 5) == list(texts)  # fits: everything, in order
    a, b, c = docs.sample(20_000, 0), docs.sample(20_000, 0), docs.sample(20_000, 1)
    assert a == b and a != c
    assert 0 < sum(len(t.encode()) for t in a) <= 20_000
    # files: the same rules, and every sampled block is whole lines of the file
    path = tmp_path / "big.txt"
    path.write_text("".join(texts), encoding="utf-8")
    spans = FileSpans((FileSpan(path, 0, path.stat().st_size),))
    x, y = spans.sample(50_000, 3), spans.sample(50_000, 3)
    assert x == y and 0 < sum(len(t.encode()) for t in x) <= 50_000 and x != spans.sample(50_000, 4)
    lines = set(path.read_text(encoding="utf-8").splitlines())
    assert all(line in lines for block in x for line in block.splitlines())


def test_train_bytes_bounds_what_the_tokenizer_sees_and_is_logged(tmp_path, cache_dir, monkeypatch, caplog):
    path = tmp_path / "c.txt"
    path.write_text(mixed_text(300, seed=3), encoding="utf-8")
    seen = []
    real = build_tokenizer

    def spy(cfg, sample):
        seen.append(sum(len(t.encode()) for t in sample))
        return real(cfg, sample)

    monkeypatch.setattr("zoo.data.build.build_tokenizer", spy)
    data = {"name": "text", "files": str(path)}
    with caplog.at_level("INFO", logger="zoo.data.build"):
        build_data(data, {**SMALL_BPE, "train_bytes": 40_000}, task="lm", cache_dir=cache_dir, **KW)
    assert 0 < seen[0] <= 40_000
    assert "tokenizer.train_bytes=40,000, seed 0" in caplog.text
    build_data(data, {**SMALL_BPE, "train_bytes": 40_000}, task="lm", cache_dir=cache_dir, **KW)  # hit
    build_data(data, {**SMALL_BPE, "train_bytes": 40_000}, task="lm", cache_dir=cache_dir,
               **{**KW, "seed": 1})
    assert len(seen) == 2  # another seed draws another sample: another entry; the same seed: a cache hit


def test_interrupted_pretokenisation_leaves_nothing_a_later_run_trusts(tmp_path, cache_dir, monkeypatch):
    path = tmp_path / "c.txt"
    path.write_text(mixed_text(150, seed=4), encoding="utf-8")
    data = {"name": "text", "files": str(path)}
    import zoo.data.pretokenize as pre

    calls = {"n": 0}
    real_write = pre.RaggedWriter.write

    def dies_after_one_batch(self, *args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # as if the run were stopped mid-file
        return real_write(self, *args)

    monkeypatch.setattr(pre.RaggedWriter, "write", dies_after_one_batch)
    monkeypatch.setattr(pre, "BATCH_CHARS", 20_000)
    with pytest.raises(KeyboardInterrupt):
        build_data(data, SMALL_BPE, task="lm", cache_dir=cache_dir, **KW)
    assert calls["n"] == 2 and list(cache_dir.iterdir()) == []  # no entry, no half shard, no temp folder
    monkeypatch.setattr(pre.RaggedWriter, "write", real_write)
    tok, dm = build_data(data, SMALL_BPE, task="lm", cache_dir=cache_dir, **KW)
    (entry,) = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["arrays"] == {"train.tokens": "ragged", "val.tokens": "ragged",
                                  "val.tokens.bytes": "uint32"}
    train_text = "".join(FileSpans(tuple(file_spans([path], 0.1)[0])).sample(None, 0))
    expected = encode_documents(tok, [train_text], append_eos=True).ids
    np.testing.assert_array_equal(dm.streams["train"], expected)


# ---------------------------------------------------------------- source bytes per token (bits per byte)


def counted(tok, docs, tmp_path, **kw) -> tuple[np.ndarray, np.ndarray]:
    """(ids, source bytes per token) of `docs` pre-tokenised with count_bytes."""
    pretokenize(tok, TextList(docs), tmp_path, "v", append_eos=True, count_bytes=True, progress=False, **kw)
    ids = read_ragged(tmp_path, "v", "uint16").ids
    return np.asarray(ids), np.fromfile(tmp_path / "v.bytes.bin", dtype=np.uint32)


def test_unknown_characters_count_their_own_bytes(tmp_path):
    """Char tokenizer, characters it never saw: each <unk> spells its character's UTF-8 bytes, <eos> none."""
    tok = build_tokenizer({"name": "char"}, ["ab\n"])
    ids, counts = counted(tok, ["ab€é\n", "😀x"], tmp_path)
    unk, eos = tok.unk_id, tok.eos_id
    a, b, newline = tok.encode("ab\n")
    assert ids.tolist() == [a, b, unk, unk, newline, eos, unk, unk, eos]
    assert counts.tolist() == [1, 1, 3, 2, 1, 0, 4, 1, 0]  # by hand: € 3 bytes, é 2, 😀 4


def test_dropped_whitespace_counts_with_the_next_token(tmp_path):
    """A tokenizer that drops whitespace: the gap before a token is spelled by it, the text after a document's
    last token by its <eos>, so every source byte is counted once."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from zoo.tokenizers import SPECIAL_TOKENS, ZooTokenizer

    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, "hi", "there", "나는"])}
    hf = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.add_special_tokens(list(SPECIAL_TOKENS))
    tok = ZooTokenizer(hf, kind="file")
    ids, counts = counted(tok, ["hi  there \n", "  나는"], tmp_path)
    assert ids.tolist() == [5, 6, tok.eos_id, 7, tok.eos_id]
    # "hi", "  there", " \n", "  나는" (6 bytes), nothing left
    assert counts.tolist() == [2, 2 + 5, 2, 2 + 6, 0]


def test_byte_level_bpe_counts_every_byte_once_per_document(tmp_path, tok):
    """Byte-level BPE cuts a character into several tokens: it counts once; each document's tokens (and its
    <eos>) spell exactly its UTF-8 bytes, across pieces and batches."""
    docs = [mixed_text(40, seed=5), "나는 사과를 🙂", "x", "   "]
    ids, counts = counted(tok, docs, tmp_path, batch_chars=3_000)
    offsets = read_ragged(tmp_path, "v", "uint16").offsets
    assert len(counts) == len(ids)
    assert ([int(counts[offsets[i]:offsets[i + 1]].sum()) for i in range(len(docs))]
            == [len(d.encode()) for d in docs])
    plain = tmp_path / "plain"
    plain.mkdir()
    pretokenize(tok, TextList(docs), plain, "v", append_eos=True, progress=False, batch_chars=3_000)
    np.testing.assert_array_equal(read_ragged(plain, "v", "uint16").ids, ids)  # counting changes no id


def test_build_keeps_bytes_for_the_validation_split_only(tmp_path, cache_dir):
    path = tmp_path / "c.txt"
    path.write_text("line of text é\n" * 400, encoding="utf-8")
    _, dm = build_data({"name": "text", "files": str(path)}, {"name": "char"}, task="lm", cache_dir=cache_dir,
                       **KW)
    (entry,) = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    assert not (entry / "train.tokens.bytes.bin").exists() and set(dm.token_bytes) == {"val"}
    val_text = "".join(FileSpans(tuple(file_spans([path], 0.1)[1])).sample(None, 0))
    assert (int(dm.token_bytes["val"].sum()) == len(val_text.encode())
            and len(dm.token_bytes["val"]) == len(dm.streams["val"]))


# ------------------------------------------------------------------ a file that changes while it is read


REWRITES = {  # where the file is rewritten (same size) and, for the second, put back
    "before_encoding": "rewritten after the cache key was hashed, before any text is encoded",
    "mid_encoding": "rewritten after the first batch was encoded, restored after the second",
}


@pytest.mark.parametrize("when", sorted(REWRITES))
def test_a_file_rewritten_while_it_is_tokenized_is_not_cached(tmp_path, cache_dir, monkeypatch, when):
    """The cache key hashes the text in one pass and pre-tokenisation reads it again: a file changed in
    between (or during) must not leave an entry under the original content's key that holds the new content's
    ids."""
    import zoo.data.pretokenize as pre
    import zoo.data.sources.base as corpora

    path = tmp_path / "c.txt"
    original = mixed_text(150, seed=6)
    path.write_text(original, encoding="utf-8")
    rewritten = original.encode().replace(b"def", b"fed")  # same size, other text
    assert rewritten != original.encode()
    data = {"name": "text", "files": str(path)}
    real_pretokenize, real_write = pre.pretokenize, pre.RaggedWriter.write
    writes = {"n": 0}

    def rewrite_first(*args, **kwargs):  # between the key's pass and the encoding pass
        if writes["n"] == 0:
            path.write_bytes(rewritten)
        writes["n"] += 1
        return real_pretokenize(*args, **kwargs)

    def rewrite_mid_pass(self, *args):  # within the encoding pass (batches are read while others encode)
        writes["n"] += 1
        if writes["n"] == 1:
            path.write_bytes(rewritten)
        if writes["n"] == 2:
            path.write_bytes(original.encode())  # and put back, as in the report
        return real_write(self, *args)

    monkeypatch.setattr(pre, "BATCH_CHARS", 2_000)
    monkeypatch.setattr("zoo.data.documents.READ_BYTES", 1_000)  # the file is read a little at a time
    if when == "before_encoding":
        monkeypatch.setattr(corpora, "pretokenize", rewrite_first)
    else:
        monkeypatch.setattr(pre.RaggedWriter, "write", rewrite_mid_pass)
    with pytest.raises(ValueError,
                       match=re.escape(f"{path} changed while it was being read") + ".* nothing was cached"):
        build_data(data, {"name": "char"}, task="lm", cache_dir=cache_dir, **KW)
    assert writes["n"] >= 1 and list(cache_dir.iterdir()) == []  # no entry under any key, no temp folder

    monkeypatch.undo()
    path.write_text(original, encoding="utf-8")  # the original content: built afresh, its own ids
    tok, dm = build_data(data, {"name": "char"}, task="lm", cache_dir=cache_dir, **KW)
    train, val = file_spans([path], 0.1)
    for split, spans in (("train", train), ("val", val)):
        text = "".join(FileSpans(tuple(spans)).sample(None, 0))
        np.testing.assert_array_equal(dm.streams[split], encode_documents(tok, [text], append_eos=True).ids)
