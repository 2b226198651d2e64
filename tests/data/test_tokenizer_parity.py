"""zoo reads a ``tokenizer.json`` exactly as transformers reads it (issue 22 item 4).

Every kind in tests/data/tokenizer_kinds.py (WordPiece + BertNormalizer, byte-level BPE with and without prefix
space, Metaspace + Unigram, Llama's byte-fallback BPE, added tokens, stored padding/truncation) is built locally,
saved as transformers saves it and loaded both by zoo's public paths (``tokenizer=hf``, the folder a run or the data
cache saves and reads back as ``tokenizer=file``) and by ``transformers.AutoTokenizer``: ids with and without the
template, and decoding with and without special tokens, are equal on a multilingual text set with documents of
several thousand tokens. Where zoo chooses otherwise (special-token text in the input stays text), the test says so.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.data.tokenizer_kinds import CODE, KINDS, corpus, save_folder
from zoo.data import build_data, load_tokenizer
from zoo.data.documents import split_point
from zoo.data.tokenizer import CHUNK_CHARS, build_tokenizer, chunk_text

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
}
SPECIAL_TEXT = "<|im_start|>user\nhi<|im_end|> a <|endoftext|> b [CLS] x [SEP] <s> </s> <pad> <mask> <extra_id_0>"
MIN_LONG_TOKENS = 3000


@pytest.fixture(scope="session")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizer_kinds")
    return {kind: save_folder(kind, root / kind) for kind in KINDS}


@pytest.fixture(scope="session")
def zoo_toks(folders, tmp_path_factory):
    """kind -> (``tokenizer=hf`` on the folder, the same saved by a run and read back as ``tokenizer=file``)."""
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
                                        for which, ids in (("plain", p), ("framed", f)) for skip in (True, False)}}
                     for name, p, f in zip(names, plain, framed, strict=True)}
    return out


def test_each_kind_is_built_as_described(folders):
    """The fixtures really hold what the kinds claim (else the parity below would prove less)."""
    files = {kind: json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")) for kind, folder in folders.items()}
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
    assert files["llama_add_eos"]["post_processor"]["single"] == llama["post_processor"]["single"]  # no </s> in file
    added = {t["content"]: t["special"] for t in files["added_tokens"]["added_tokens"]}
    assert added["<|im_end|>"] is True and added["<think>"] is False and added[" [note]"] is False
    for folder in folders.values():
        assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= {p.name for p in folder.iterdir()}


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
        assert tok.specials.prefix == (2,) and tok.specials.suffix == (3,)  # [CLS] x [SEP], no pads in the template
        assert len(tok.encode(LONG["long_lines"])) > 128 * 20
        assert tok.encode_batch(["a", "the zebra runs"]) == ref(["a", "the zebra runs"], add_special_tokens=False).input_ids
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
    assert bare.encode("the zebra") == zoo_bpe.encode("the zebra") and len(bare.encode(LONG["long_lines"])) > 64

    old_run = tmp_path / "old_run"
    hf_tok = build_tokenizer({"name": "hf", "path": str(folders["stored_padding"])}, [])
    hf_tok.save(old_run)
    (old_run / "tokenizer.json").write_bytes((folders["stored_padding"] / "tokenizer.json").read_bytes())
    again = load_tokenizer(old_run)
    assert again.encode("the zebra") == hf_tok.encode("the zebra") and len(again.encode("the zebra")) == 2
    assert again.specials == hf_tok.specials

    from zoo.data.tokenizer import ZooTokenizer

    assert len(ZooTokenizer(padded, kind="file").encode("the zebra")) < 64


def test_the_data_pipeline_keeps_every_token_of_a_long_document(folders, refs, tmp_path):
    """The corpus pre-tokenised for a run (what init_from trains on) with the stored-padding file: each
    document's training part is ``[CLS] ids [SEP]`` with every id transformers gives it (it used to be cut to
    128 ids per 1024-character piece, pads included)."""
    ref, data = refs["stored_padding"], tmp_path / "text"
    data.mkdir()
    docs = ["\n".join(corpus(150, seed=20 + i)) + "\n" for i in range(2)]
    for i, doc in enumerate(docs):
        (data / f"doc{i}.txt").write_text(doc, encoding="utf-8")
    tok, dm = build_data({"name": "text", "files": str(data / "*.txt"), "val_fraction": 0.1},
                         {"name": "hf", "path": str(folders["stored_padding"])}, task="lm", max_seq_len=64,
                         batch_size=2, cache_dir=tmp_path / "cache")
    stream = np.asarray(dm.streams["train"]).tolist()
    expected = []
    for i in range(len(docs)):
        raw = (data / f"doc{i}.txt").read_bytes()
        expected += ref(raw[: split_point(data / f"doc{i}.txt", len(raw), 0.1)].decode("utf-8")).input_ids
    assert stream == expected and len(stream) > MIN_LONG_TOKENS


# transformers encodes a document in one call; zoo's data pipeline (encode_long, and pre-tokenisation, which cuts
# the same pieces) encodes it in pieces of <= CHUNK_CHARS characters, cut after a newline when one is near, else
# inside a word. Each piece keeps all of its tokens, but at a cut the ids can differ from one call on the whole:
# a cut inside a word splits it; a piece starting after a newline gets Llama's "▁" or byte-level BPE's prefix
# space; GPT-2's regex joins "\n" with the spaces after it. Measured here, stated in docs/data.md; not fixed yet.
PIECES_DIFFER = {
    "bert_wordpiece": {"long_paragraph"}, "stored_padding": {"long_paragraph"}, "t5_unigram": {"long_paragraph"},
    "gpt2_bytelevel": {"long_paragraph", "long_code"}, "added_tokens": {"long_paragraph", "long_code"},
    "bytelevel_prefix_space": set(LONG), "llama_bpe": set(LONG), "llama_add_eos": set(LONG),
    "llama_metaspace": set(LONG),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_data_pipelines_pieces_keep_every_token_and_differ_only_at_cuts(kind, zoo_toks, refs, expected):
    tok, ref = zoo_toks[kind][0], refs[kind]
    for name, text in LONG.items():
        pieces = list(chunk_text(text))
        assert len(pieces) >= len(text) // CHUNK_CHARS  # several cuts in every long document
        ids = tok.encode_long(text)
        assert ids == [i for piece in ref(pieces, add_special_tokens=False).input_ids for i in piece], name
        assert (ids != expected[kind][name]["plain"]) == (name in PIECES_DIFFER[kind]), name


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
    """The file says ``<s> $A``, the config ``add_eos_token: true``: transformers 5 drops the config flags when a
    tokenizer.json is there (4.x rebuilt the template as ``<s> $A </s>``), and zoo keeps the file's template."""
    for tok in zoo_toks["llama_add_eos"]:
        assert tok.specials.prefix == (1,) and tok.specials.suffix == ()
        assert tok.specials.frame(tok.encode("the zebra")).tolist() == refs["llama_add_eos"]("the zebra").input_ids


# ------------------------------------------------------------------------------ folders naming a family class

FAMILY_CLASS = {"bert_wordpiece": "BertTokenizer", "stored_padding": "BertTokenizer", "gpt2_bytelevel": "GPT2Tokenizer",
                "added_tokens": "GPT2Tokenizer", "bytelevel_prefix_space": "RobertaTokenizer",
                "t5_unigram": "T5Tokenizer", "llama_bpe": "LlamaTokenizer", "llama_add_eos": "LlamaTokenizer",
                "llama_metaspace": "LlamaTokenizer"}
# transformers 5's LlamaTokenizer rebuilds the pipeline as Metaspace(prepend_scheme="first") and ignores the file's
# Prepend("▁") normalizer (Llama 2's file, as sentencepiece and transformers 4.x tokenize): a text that starts
# with spaces gets one "▁" fewer there. zoo keeps the file's pipeline (docs/data.md).
CLASS_DIFFERS = {"llama_bpe": {"leading_trailing", "one_space"}, "llama_add_eos": {"leading_trailing", "one_space"}}


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
            assert ref.decode(framed, skip_special_tokens=skip) == tok.decode(framed, skip_special_tokens=skip), name
    assert differs == CLASS_DIFFERS.get(kind, set())
    for name in differs:  # one "▁" fewer at the start, the rest equal
        ours, theirs = expected[kind][name]["plain"], ref(TEXTS[name], add_special_tokens=False).input_ids
        assert len(ours) == len(theirs) + 1 and ours[1:] == theirs and tok.hf.id_to_token(ours[0]) == "▁", name


# ------------------------------------------------------------------------ where zoo chooses otherwise


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_special_token_text_in_the_input_stays_text(kind, folders, zoo_toks, refs):
    """zoo encodes the text "<|im_end|>", "[CLS]"... as text, never as the special id (so data cannot inject
    control tokens): transformers' ``split_special_tokens=True``. transformers' default reads it as the token."""
    split = transformers.AutoTokenizer.from_pretrained(folders[kind], split_special_tokens=True)
    for tok in zoo_toks[kind]:
        ids = tok.encode(SPECIAL_TEXT)
        assert ids == split(SPECIAL_TEXT, add_special_tokens=False).input_ids
        assert ids != refs[kind](SPECIAL_TEXT, add_special_tokens=False).input_ids  # the documented difference


def test_non_special_added_tokens_are_matched_in_text(zoo_toks, refs):
    tok, ref = zoo_toks["added_tokens"][0], refs["added_tokens"]
    ids = tok.encode(TEXTS["added_tokens"])
    for token in ("<think>", "</think>", "zookeeper", " [note]"):
        assert tok.hf.token_to_id(token) in ids, token
    assert ids == ref(TEXTS["added_tokens"], add_special_tokens=False).input_ids
