"""zoo reads a ``tokenizer.json`` exactly as transformers reads it (issue 22 item 4).

Every kind in tests/tokenizers/tokenizer_kinds.py (WordPiece + BertNormalizer, byte-level BPE with and without
prefix space, Metaspace + Unigram, Llama's byte-fallback BPE, added tokens, stored padding/truncation) is
built locally, saved as transformers saves it and loaded both by zoo's public paths (``tokenizer=hf``, the
folder a run or the data cache saves and reads back as ``tokenizer=file``) and by
``transformers.AutoTokenizer``: ids with and without the template, and decoding with and without special
tokens, are equal on a multilingual text set with documents of several thousand tokens, and so are the data
pipeline's ids of those documents, which it encodes in bounded windows (zoo.tokenizers.tiling), with the
source bytes each token spells. Where zoo chooses otherwise (special-token text in the input stays text), the
test says so.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.tokenizers.tokenizer_kinds import CODE, KINDS, corpus, save_folder
from zoo.data import load_tokenizer
from zoo.data.documents import TextList, split_point
from zoo.data.pretokenize import pretokenize
from zoo.tasks import build_data
from zoo.tokenizers import build_tokenizer
from zoo.tokenizers.tiling import CUTS, Cuts, encode_texts, windows

transformers = pytest.importorskip("transformers")

TEXTS = {
    "latin_accents": "Crème brûlée à la façon de Zoë — naïve café, résumé; ÀÉÎÕÜ ñ ç ß Ångström",
    "korean": "나는 동물원에서 얼룩말을 봤다. 정말 귀여웠어!",
    "chinese": "我们今天在动物园看到了斑马和狮子。天气很好！",
    "emoji": "🦓🦁 👩‍👩‍👧 🇰🇷 ❤️ emoji😀mixed🧪",
    "code": "def f(x):\n\tif x:\n        return {'a': [1, 2]}  # ok\n" + CODE[1],
    "whitespace_runs": "a    b\t\t c\n\n\n d   \r\n  \t",
    "leading_trailing": "   leading and trailing   ",
    "empty": "",
    "one_space": " ",
    "newlines": "\n\n",
    "punctuation": "don't stop . it 's , we 're ? I 'm ok ! they 've",
    "unseen_scripts": "unseen: ऄक्षर العربية ☃ \u200b zero-width ~~~",
    "numbers": "12345 67.89 1e-5 0x1F",
    "added_tokens": "<think>why</think> the zookeeper said [note] hi zookeepers [note]x",
}
LONG = {  # (name -> text) documents of several thousand tokens for every kind
    "long_lines": "\n".join(corpus(300, seed=7)),
    "long_paragraph": " ".join(corpus(340, seed=8)).replace("\n", " "),
    "long_code": "\n\n".join(CODE * 60) + "\n   \n\t\n",
    # no whitespace at all (cut before punctuation), then a
    # 1,000-character word (longer than a small window's context)
    "long_unbroken": "".join(corpus(260, seed=9)).replace(" ", "").replace("\n", "") + "zebra" * 200,
}
SPECIAL_TEXT = ("<|im_start|>user\n"
                "hi<|im_end|> a <|endoftext|> b [CLS] x [SEP] <s> </s> <pad> <mask> <extra_id_0>")
MIN_LONG_TOKENS = 3000


@pytest.fixture(scope="session")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizer_kinds")
    return {kind: save_folder(kind, root / kind) for kind in KINDS}


@pytest.fixture(scope="session")
def zoo_toks(folders, tmp_path_factory):
    """kind -> (``tokenizer=hf`` on the folder, the same saved by a run and read back as
    ``tokenizer=file``)."""
    saved = tmp_path_factory.mktemp("saved")
    out = {}
    for kind, folder in folders.items():
        tok = build_tokenizer({"name": "hf", "path": str(folder)}, [])
        tok.save(saved / kind)
        out[kind] = (tok, build_tokenizer({"name": "file", "path": str(saved / kind)}, []))
    return out


@pytest.fixture(scope="session")
def refs(folders):
    return {kind: transformers.AutoTokenizer.from_pretrained(folder) for kind, folder in folders.items()}


@pytest.fixture(scope="session")
def expected(refs):
    """kind -> text name -> transformers' ids without and with the template, and its decode of each with and
    without special tokens (computed once, compared with both of zoo's paths)."""
    out = {}
    for kind, ref in refs.items():
        names, texts = list({**TEXTS, **LONG}), list({**TEXTS, **LONG}.values())
        plain, framed = ref(texts, add_special_tokens=False).input_ids, ref(texts).input_ids
        out[kind] = {name: {"plain": p, "framed": f,
                            "decoded": {(which, skip): ref.decode(ids, skip_special_tokens=skip)
                                        for which, ids in (("plain", p), ("framed", f))
                                        for skip in (True, False)}}
                     for name, p, f in zip(names, plain, framed, strict=True)}
    return out


def test_each_kind_is_built_as_described(folders):
    """The fixtures really hold what the kinds claim (else the parity below would prove less)."""
    files = {kind: json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
             for kind, folder in folders.items()}
    assert files["stored_padding"]["padding"]["strategy"] == {"Fixed": 128}
    assert files["stored_padding"]["truncation"]["max_length"] == 128
    assert files["bert_wordpiece"]["normalizer"]["type"] == "BertNormalizer"
    assert files["gpt2_bytelevel"]["pre_tokenizer"]["add_prefix_space"] is False
    assert files["bytelevel_prefix_space"]["pre_tokenizer"]["add_prefix_space"] is True
    assert files["t5_unigram"]["model"]["type"] == "Unigram"
    assert files["t5_unigram"]["pre_tokenizer"]["pretokenizers"][1]["type"] == "Metaspace"
    llama = files["llama_bpe"]
    assert llama["model"]["byte_fallback"] is True and llama["model"]["vocab"]["<0x0A>"] == 13
    assert [n["type"] for n in llama["normalizer"]["normalizers"]] == ["Prepend", "Replace"]
    assert files["llama_metaspace"]["pre_tokenizer"]["prepend_scheme"] == "first"
    # no </s> in file
    assert files["llama_add_eos"]["post_processor"]["single"] == llama["post_processor"]["single"]
    added = {t["content"]: t["special"] for t in files["added_tokens"]["added_tokens"]}
    assert added["<|im_end|>"] is True and added["<think>"] is False and added[" [note]"] is False
    for folder in folders.values():
        assert {"tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json"} <= {p.name for p in folder.iterdir()}


# ------------------------------------------------------------------------------------------------- ids


@pytest.mark.parametrize("path", ["hf", "saved"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ids_equal_auto_tokenizer(kind, path, zoo_toks, refs, expected):
    tok, want = zoo_toks[kind][path == "saved"], expected[kind]
    assert tok.vocab_size == len(refs[kind])
    for name, text in {**TEXTS, **LONG}.items():
        ids = tok.encode(text)
        assert ids == want[name]["plain"], name
        assert tok.specials.frame(ids).tolist() == want[name]["framed"], name  # the template, as transformers
    assert tok.encode_batch(list(LONG.values())) == [want[name]["plain"] for name in LONG]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_long_document_keeps_all_its_tokens(kind, zoo_toks, expected):
    for name, text in LONG.items():
        ids = zoo_toks[kind][0].encode(text)
        assert len(ids) >= MIN_LONG_TOKENS and ids == expected[kind][name]["plain"], name


def test_stored_padding_and_truncation_never_apply(zoo_toks, refs):
    """sentence-transformers' MiniLM file pads and cuts every text to 128 ids; zoo used to return those 128
    (pads as content, a long text cut), transformers ignores both settings unless a call asks."""
    ref = refs["stored_padding"]
    for tok in zoo_toks["stored_padding"]:
        assert tok.encode("the zebra") == ref("the zebra", add_special_tokens=False).input_ids
        assert len(tok.encode("the zebra")) == 2 and tok.pad_id not in tok.encode("the zebra")
        # [CLS] x [SEP], no pads in the template
        assert tok.specials.prefix == (2,) and tok.specials.suffix == (3,)
        assert len(tok.encode(LONG["long_lines"])) > 128 * 20
        assert (tok.encode_batch(["a", "the zebra runs"])
                == ref(["a", "the zebra runs"], add_special_tokens=False).input_ids)
    assert len(ref("a", padding="max_length", max_length=8).input_ids) == 8  # transformers pads when asked


def test_stored_padding_is_off_wherever_zoo_reads_a_tokenizer_json(folders, tmp_path):
    """tokenizer=file on a bare tokenizer.json, a run's saved folder written before this fix (its file still
    holds the padding), and a tokenizer object handed over in code."""
    from tokenizers import Tokenizer

    zoo_bpe = build_tokenizer({"name": "bpe", "vocab_size": 300}, corpus(200))
    padded = Tokenizer.from_str(zoo_bpe.hf.to_str())
    padded.enable_padding(pad_id=0, pad_token="<pad>", length=64)
    padded.enable_truncation(max_length=64)
    padded.save(str(tmp_path / "tokenizer.json"))
    bare = build_tokenizer({"name": "file", "path": str(tmp_path / "tokenizer.json")}, [])
    assert (bare.encode("the zebra") == zoo_bpe.encode("the zebra")
            and len(bare.encode(LONG["long_lines"])) > 64)

    old_run = tmp_path / "old_run"
    hf_tok = build_tokenizer({"name": "hf", "path": str(folders["stored_padding"])}, [])
    hf_tok.save(old_run)
    (old_run / "tokenizer.json").write_bytes((folders["stored_padding"] / "tokenizer.json").read_bytes())
    again = load_tokenizer(old_run)
    assert again.encode("the zebra") == hf_tok.encode("the zebra") and len(again.encode("the zebra")) == 2
    assert again.specials == hf_tok.specials

    from zoo.tokenizers import ZooTokenizer

    assert len(ZooTokenizer(padded, kind="file").encode("the zebra")) < 64


PIPELINE_CUTS = {"default": CUTS, "small": Cuts(piece=256, context=48, longest=2048)}  # small: many cuts


@pytest.fixture(scope="session")
def long_offsets(refs):
    """kind -> transformers' character offsets of each long document's tokens (one call on the whole)."""
    return {kind: ref(list(LONG.values()), add_special_tokens=False,
                      return_offsets_mapping=True)["offset_mapping"]
            for kind, ref in refs.items()}


def spelled_by_hand(texts: list[str], offsets: list, before: tuple, after: tuple) -> list[int]:
    """The UTF-8 bytes each token of the framed documents spells, from one call's offsets: a token spells the
    text from the furthest end reached before it to its own end; what is left (text after a document's last
    token) goes with the next token, a frame token spells nothing else."""
    out: list[int] = []
    carry = 0

    def put(counts: list[int]) -> None:
        nonlocal carry
        if counts:
            counts[0] += carry
            carry = 0
        out.extend(counts)

    for text, spans in zip(texts, offsets, strict=True):
        put([0] * len(before))
        spelled, reach = [], 0
        for _, end in spans:
            spelled.append(len(text[reach : max(reach, end)].encode("utf-8")))
            reach = max(reach, end)
        put(spelled)
        carry += len(text[reach:].encode("utf-8"))
        put([0] * len(after))
    out[-1] += carry
    return out


@pytest.mark.parametrize("cuts", sorted(PIPELINE_CUTS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_data_pipeline_encodes_a_long_document_as_one_call(kind, cuts, zoo_toks, expected, long_offsets,
                                                                 tmp_path):
    """Pre-tokenisation and the in-memory encoder (encode_documents, encode_long) cut a long document into
    windows; its ids are still transformers' ids of the whole document, and each token's source bytes (bits
    per byte) are those one call's offsets give. With 1,024-character pieces encoded alone they used to differ
    at the cuts (13 fewer to 50 more ids per document: a word cut in two, a "▁" or prefix space at every
    piece)."""
    tok, cut = zoo_toks[kind][0], PIPELINE_CUTS[cuts]
    texts, want = list(LONG.values()), [expected[kind][name]["plain"] for name in LONG]
    # cuts
    assert all(len(list(windows([text], cut))) >= max(3, len(text) // (2 * cut.piece)) for text in texts)
    assert encode_texts(tok.hf, texts, cut) == want
    if cuts == "default":
        assert [tok.encode_long(text) for text in texts] == want
    pretokenize(tok, TextList(texts), tmp_path, "v", append_eos=True, count_bytes=True, progress=False,
                batch_chars=10_000, cuts=cut)
    ids = np.fromfile(tmp_path / "v.ids.bin", dtype=np.uint16).tolist()
    before, after = tok.specials.document_ends()
    assert ids == [i for row in want for i in (*before, *row, *after)]
    counts = np.fromfile(tmp_path / "v.bytes.bin", dtype=np.uint32).tolist()
    assert counts == spelled_by_hand(texts, long_offsets[kind], before, after)
    assert sum(counts) == sum(len(text.encode("utf-8")) for text in texts)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_token_starts_never_decrease(kind, zoo_toks):
    """What the windows' tiling bisects on (zoo.tokenizers.tiling.Tokens): along an encoding, token starts
    never decrease, and ``token_to_chars`` reads the offsets one token at a time."""
    for name, text in {**TEXTS, **LONG}.items():
        encoding = zoo_toks[kind][0].hf.encode(text, add_special_tokens=False)
        starts = [start for start, _ in encoding.offsets]
        assert starts == sorted(starts), name
        assert [encoding.token_to_chars(i) for i in range(len(encoding))] == encoding.offsets, name


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_short_texts_cut_every_few_words_are_one_call(kind, zoo_toks, expected):
    """Pieces of 8-16 characters with 8 of context: many windows too short for their words are mended (encoded
    again as one), and what a trimmed offset puts at a text's very end (a byte-level prefix-space file's
    trailing spaces start at the text's length) is kept."""
    texts = list(TEXTS.values())
    assert encode_texts(zoo_toks[kind][0].hf, texts, Cuts(piece=16, context=8, longest=256)) == [
        expected[kind][name]["plain"] for name in TEXTS]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_build_data_keeps_every_token_of_a_long_document(kind, folders, refs, tmp_path):
    """The corpus pre-tokenised for a run (what init_from trains on), every kind: each document's training
    part is ``before + ids + after`` (the tokenizer's document frame) with exactly transformers' ids of that
    text, one long paragraph and lines after it (the stored-padding file used to cut each 1024-character piece
    to 128 ids)."""
    ref, data = refs[kind], tmp_path / "text"
    data.mkdir()
    docs = [" ".join(corpus(320, seed=20 + i)).replace("\n", " ") + "\n" + "\n".join(corpus(40, seed=30 + i))
            + "\n"
            for i in range(2)]
    for i, doc in enumerate(docs):
        (data / f"doc{i}.txt").write_text(doc, encoding="utf-8")
    tok, dm = build_data({"name": "text", "files": str(data / "*.txt"), "val_fraction": 0.1},
                         {"name": "hf", "path": str(folders[kind])}, task="lm", max_seq_len=64,
                         batch_size=2, cache_dir=tmp_path / "cache")
    before, after = tok.specials.document_ends()
    expected = []
    for i in range(len(docs)):
        raw = (data / f"doc{i}.txt").read_bytes()
        text = raw[: split_point(data / f"doc{i}.txt", len(raw), 0.1)].decode("utf-8")
        assert len(text) > 2 * CUTS.piece
        expected += [*before, *ref(text, add_special_tokens=False).input_ids, *after]
    assert np.asarray(dm.streams["train"]).tolist() == expected and len(expected) > MIN_LONG_TOKENS


# ---------------------------------------------------------------------------------------------- decode


@pytest.mark.parametrize("path", ["hf", "saved"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_decode_equals_auto_tokenizer(kind, path, zoo_toks, expected):
    tok = zoo_toks[kind][path == "saved"]
    for name, want in expected[kind].items():
        for (which, skip), text in want["decoded"].items():
            assert tok.decode(want[which], skip_special_tokens=skip) == text, (name, which, skip)


def test_decode_cleans_up_spaces_as_the_folder_says(zoo_toks, refs):
    """BERT's folders ship clean_up_tokenization_spaces=true: transformers drops the space WordPiece leaves
    before punctuation and contractions; a BPE model is left alone even when its config says true (gpt2)."""
    bert, gpt2 = zoo_toks["bert_wordpiece"][0], zoo_toks["gpt2_bytelevel"][0]
    ids = bert.encode("don't stop. it's ok!")
    assert bert.decode(ids) == "don't stop. it's ok!" == refs["bert_wordpiece"].decode(ids)
    assert bert.hf.decode(ids) == "don ' t stop. it ' s ok!"  # what the tokenizer.json alone gives
    assert bert.clean_up_spaces and not gpt2.clean_up_spaces
    text = "a , b . c ' d"
    assert gpt2.decode(gpt2.encode(text)) == text == refs["gpt2_bytelevel"].decode(gpt2.encode(text))


def test_save_hf_keeps_the_decode_cleanup(zoo_toks, tmp_path):
    bert = zoo_toks["bert_wordpiece"][0]
    ref = transformers.AutoTokenizer.from_pretrained(bert.save_hf(tmp_path / "out"))
    ids = bert.encode(TEXTS["punctuation"])
    assert ref.decode(ids) == bert.decode(ids) == "don't stop. it's, we're? i'm ok! they've"


# -------------------------------------------------------------------------------- config over the file


def test_the_files_template_wins_over_add_eos_token_in_the_config(zoo_toks, refs):
    """The file says ``<s> $A``, the config ``add_eos_token: true``: transformers 5 drops the config flags
    when a tokenizer.json is there (4.x rebuilt the template as ``<s> $A </s>``), and zoo keeps the file's
    template."""
    for tok in zoo_toks["llama_add_eos"]:
        assert tok.specials.prefix == (1,) and tok.specials.suffix == ()
        assert (tok.specials.frame(tok.encode("the zebra")).tolist()
                == refs["llama_add_eos"]("the zebra").input_ids)


# ------------------------------------------------------------------------------ folders naming a family class

FAMILY_CLASS = {"bert_wordpiece": "BertTokenizer", "stored_padding": "BertTokenizer",
                "gpt2_bytelevel": "GPT2Tokenizer", "added_tokens": "GPT2Tokenizer",
                "bytelevel_prefix_space": "RobertaTokenizer", "t5_unigram": "T5Tokenizer",
                "llama_bpe": "LlamaTokenizer", "llama_add_eos": "LlamaTokenizer",
                "llama_metaspace": "LlamaTokenizer"}
# transformers 5's LlamaTokenizer rebuilds the pipeline as Metaspace(prepend_scheme="first") and ignores the
# file's Prepend("▁") normalizer (Llama 2's file, as sentencepiece and transformers 4.x tokenize): a text that
# starts with spaces gets one "▁" fewer there. zoo keeps the file's pipeline (docs/data.md).
CLASS_DIFFERS = {"llama_bpe": {"leading_trailing", "one_space"},
                 "llama_add_eos": {"leading_trailing", "one_space"}}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_folders_naming_a_family_class(kind, folders, zoo_toks, expected, tmp_path):
    """Downloaded folders name a family class (``"tokenizer_class": "BertTokenizer"``), which transformers 5
    rebuilds from the file's vocabulary with the class's own pipeline; the ids still equal zoo's, except where
    CLASS_DIFFERS says (and there they do differ)."""
    folder = shutil.copytree(folders[kind], tmp_path / kind)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["tokenizer_class"] = FAMILY_CLASS[kind]
    if kind == "t5_unigram":
        config["extra_ids"] = 3  # T5Tokenizer checks its <extra_id_*> count
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(ref).__name__ == FAMILY_CLASS[kind]
    tok, differs = zoo_toks[kind][0], set()
    for name, text in {**TEXTS, "long_lines": LONG["long_lines"]}.items():
        ids = ref(text, add_special_tokens=False).input_ids
        if ids != tok.encode(text):
            differs.add(name)
            continue
        framed = ref(text).input_ids
        assert framed == tok.specials.frame(ids).tolist(), name
        for skip in (True, False):
            assert (ref.decode(framed, skip_special_tokens=skip)
                    == tok.decode(framed, skip_special_tokens=skip)), name
    assert differs == CLASS_DIFFERS.get(kind, set())
    for name in differs:  # one "▁" fewer at the start, the rest equal
        ours, theirs = expected[kind][name]["plain"], ref(TEXTS[name], add_special_tokens=False).input_ids
        assert (len(ours) == len(theirs) + 1 and ours[1:] == theirs
                and tok.hf.id_to_token(ours[0]) == "▁"), name


# ------------------------------------------------------------------------ where zoo chooses otherwise


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_special_token_text_in_the_input_stays_text(kind, folders, zoo_toks, refs):
    """zoo encodes the text "<|im_end|>", "[CLS]"... as text, never as the special id (so data cannot inject
    control tokens): transformers' ``split_special_tokens=True``. transformers' default reads it as the
    token."""
    split = transformers.AutoTokenizer.from_pretrained(folders[kind], split_special_tokens=True)
    for tok in zoo_toks[kind]:
        ids = tok.encode(SPECIAL_TEXT)
        assert ids == split(SPECIAL_TEXT, add_special_tokens=False).input_ids
        # the documented difference
        assert ids != refs[kind](SPECIAL_TEXT, add_special_tokens=False).input_ids


def test_non_special_added_tokens_are_matched_in_text(zoo_toks, refs):
    tok, ref = zoo_toks["added_tokens"][0], refs["added_tokens"]
    ids = tok.encode(TEXTS["added_tokens"])
    for token in ("<think>", "</think>", "zookeeper", " [note]"):
        assert tok.hf.token_to_id(token) in ids, token
    assert ids == ref(TEXTS["added_tokens"], add_special_tokens=False).input_ids
