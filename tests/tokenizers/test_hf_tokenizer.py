"""tokenizer=hf: Hugging Face tokenizer folders (built locally, tests/data/hf_folders.py) keep their own
special tokens; zoo's ids, templates and special ids are checked against transformers' AutoTokenizer on the
same folder, and the data built for each task against hand-worked layouts. save_hf round trips through
AutoTokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.data.conftest import SMALL_BPE
from tests.data.hf_folders import MAKERS, corpus
from zoo.config import ModelConfig
from zoo.data import load_hf_tokenizer, load_tokenizer, model_overrides
from zoo.data.datasets import mask_tokens
from zoo.tasks import build_data
from zoo.tokenizers import build_tokenizer, validate_tokenizer_cfg
from zoo.utils import IGNORE_INDEX

transformers = pytest.importorskip("transformers")

TEXTS = [
    "hello zoo, the zebra runs quickly!",
    "나는 사과를 먹었다 🦓 and 🇰🇷 👩‍👩‍👧",
    "  leading   spaces\tand a tab\nnew line  ",
    "unseen words: quixotic xylophone 12345",
    "",
]
ROLES = ("pad", "bos", "eos", "unk", "mask", "cls", "sep")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {kind: make(root / kind) for kind, make in MAKERS.items()}


@pytest.fixture(scope="module")
def auto(folders):
    return {kind: transformers.AutoTokenizer.from_pretrained(folder) for kind, folder in folders.items()}


@pytest.fixture(scope="module")
def toks(folders):
    return {kind: load_hf_tokenizer(folder) for kind, folder in folders.items()}


def reference_specials(hf_tok) -> dict[str, int | None]:
    return {role: getattr(hf_tok, f"{role}_token_id") for role in ROLES}


# ------------------------------------------------------------------------------------ ids and specials


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_ids_and_template_equal_transformers(kind, toks, auto):
    tok, ref = toks[kind], auto[kind]
    assert tok.kind == "hf" and tok.vocab_size == len(ref)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == ref(text, add_special_tokens=False).input_ids, text
        # [CLS] x [SEP], x </s>, <s> x </s>
        assert tok.specials.frame(ids).tolist() == ref(text).input_ids, text
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_special_ids_equal_transformers(kind, toks, auto):
    tok, ref = toks[kind], auto[kind]
    assert {role: getattr(tok, f"{role}_id") for role in ROLES} == reference_specials(ref)
    assert set(tok.special_ids) == set(ref.all_special_ids)


def test_family_special_ids_by_hand(toks):
    gpt2, bert, t5, roberta = toks["gpt2"], toks["bert"], toks["t5"], toks["roberta"]
    end = gpt2.vocab_size - 1  # <|endoftext|>: the last id, as GPT-2's 50256
    assert (gpt2.bos_id, gpt2.eos_id, gpt2.unk_id, gpt2.pad_id, gpt2.mask_id) == (end, end, end, None, None)
    assert gpt2.padding_id == end  # no pad: batches pad with eos (labels -100, attention mask 0)
    assert ((bert.pad_id, bert.unk_id, bert.cls_id, bert.sep_id, bert.mask_id, bert.bos_id)
            == (0, 100, 101, 102, 103, None))
    assert (t5.pad_id, t5.eos_id, t5.unk_id, t5.bos_id) == (0, 1, 2, None)
    assert t5.decoder_start_id == 0  # T5 starts the decoder with <pad>
    assert (roberta.bos_id, roberta.pad_id, roberta.eos_id, roberta.unk_id) == (0, 1, 2, 3)
    assert roberta.mask_id == roberta.vocab_size - 1


def test_model_overrides_carry_the_ids(toks):
    end = toks["gpt2"].eos_id
    assert model_overrides(toks["gpt2"]) == {"vocab_size": end + 1, "pad_id": end, "bos_id": end,
                                             "eos_id": end}
    t5 = model_overrides(toks["t5"])
    # no bos: the decoder start <pad> stands in
    assert (t5["pad_id"], t5["bos_id"], t5["eos_id"]) == (0, 0, 1)
    assert ModelConfig(vocab_size=135, **{k: v for k, v in t5.items() if k != "vocab_size"}).start_id == 0
    bert = model_overrides(toks["bert"])
    assert (bert["pad_id"], bert["bos_id"], bert["eos_id"], bert["decoder_start_id"]) == (0, 101, 102, 0)
    assert "decoder_start_id" not in model_overrides(toks["roberta"])  # <s> is bos and decoder start


def test_special_text_in_input_stays_text(toks):
    gpt2 = toks["gpt2"]
    ids = gpt2.encode("a <|endoftext|> b")
    assert gpt2.eos_id not in ids and gpt2.decode(ids) == "a <|endoftext|> b"


def test_legacy_special_tokens_map(folders, tmp_path, auto):
    """transformers 4.x folders name the tokens in special_tokens_map.json, as AddedToken dicts."""
    folder = tmp_path / "legacy"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((folders["t5"] / "tokenizer.json").read_bytes())
    added = {"content": "</s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": added, "pad_token": "<pad>", "unk_token": {**added, "content": "<unk>"}}))
    tok = load_hf_tokenizer(folder)
    assert (tok.pad_id, tok.eos_id, tok.unk_id, tok.bos_id) == (0, 1, 2, None)
    assert tok.encode(TEXTS[1]) == auto["t5"](TEXTS[1], add_special_tokens=False).input_ids


def test_zoo_save_and_load_keeps_foreign_specials(toks, tmp_path):
    """The data cache saves the tokenizer with ZooTokenizer.save and reads it back with load_tokenizer."""
    for kind, tok in toks.items():
        tok.save(tmp_path / kind)
        back = load_tokenizer(tmp_path / kind)
        assert back.kind == "hf" and back.specials == tok.specials, kind
        assert back.encode(TEXTS[1]) == tok.encode(TEXTS[1])


# -------------------------------------------------------------------------------------------- save_hf


@pytest.mark.parametrize("kind", ["zoo_bpe", "zoo_char", *sorted(MAKERS)])
def test_save_hf_loads_in_auto_tokenizer_with_the_same_ids(kind, toks, tmp_path):
    if kind == "zoo_bpe":
        tok = build_tokenizer(SMALL_BPE, corpus())
    elif kind == "zoo_char":
        tok = build_tokenizer({"name": "char"}, corpus())
    else:
        tok = toks[kind]
    folder = tok.save_hf(tmp_path / "out")
    assert {p.name for p in folder.iterdir()} == {"tokenizer.json", "tokenizer_config.json",
                                                  "special_tokens_map.json"}
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    assert {role: getattr(tok, f"{role}_id") for role in ROLES} == reference_specials(ref)
    for text in [*TEXTS, "literal <pad> and <|endoftext|> and [CLS] stay text"]:
        ids = tok.encode(text)
        assert ref(text, add_special_tokens=False).input_ids == ids, text
        assert ref(text).input_ids == tok.specials.frame(ids).tolist(), text
        assert ref.decode(ids, skip_special_tokens=True) == tok.decode(ids)
    again = load_hf_tokenizer(folder)
    assert again.specials.ids == tok.specials.ids and again.encode(TEXTS[1]) == tok.encode(TEXTS[1])


# --------------------------------------------------------------------------------- data for each task


def _write_text_files(folder, n_files=3):
    folder.mkdir()
    lines = corpus(60, seed=1)
    for i in range(n_files):
        (folder / f"doc{i}.txt").write_text("\n".join(lines[i * 20 : (i + 1) * 20]) + "\n", encoding="utf-8")
    return [(folder / f"doc{i}.txt").read_text(encoding="utf-8") for i in range(n_files)]


def test_lm_stream_joins_documents_with_endoftext(folders, auto, tmp_path):
    docs = _write_text_files(tmp_path / "text")
    tok, dm = build_data({"name": "text", "files": str(tmp_path / "text" / "*.txt"), "val_fraction": 0.2},
                         {"name": "hf", "path": str(folders["gpt2"])}, task="lm", max_seq_len=32,
                         batch_size=4, cache_dir=tmp_path / "cache")
    end = tok.eos_id
    stream = np.asarray(dm.streams["train"]).tolist()
    cuts = [i for i, t in enumerate(stream) if t == end]
    assert len(cuts) == len(docs) and cuts[-1] == len(stream) - 1  # one <|endoftext|> after each document
    pieces = [stream[a + 1 : b] for a, b in zip([-1, *cuts], cuts, strict=False)]
    ref = auto["gpt2"]
    for piece in pieces:  # each document's training part, encoded alone by transformers
        text = ref.decode(piece)
        assert (any(doc.startswith(text) for doc in docs)
                and ref(text, add_special_tokens=False).input_ids == piece)
    dm.setup("fit")
    window = dm.datasets["val"][0]
    assert (window["input_ids"].shape == (32,)
            and window["targets"].tolist() == np.asarray(dm.streams["val"])[1:33].tolist())
    assert dm.collate.pad_id == end


def test_mlm_never_masks_cls_or_sep_and_masks_with_mask_id(folders, tmp_path):
    _write_text_files(tmp_path / "text")
    tok, dm = build_data({"name": "text", "files": str(tmp_path / "text" / "*.txt"), "val_fraction": 0.2,
                          "mask_prob": 0.5}, {"name": "hf", "path": str(folders["bert"])}, task="mlm",
                         max_seq_len=24, batch_size=4, cache_dir=tmp_path / "cache")
    stream = np.asarray(dm.streams["train"])
    # [CLS] doc [SEP] per file
    assert stream[0] == 101 and (stream == 101).sum() == (stream == 102).sum() == 3
    dm.setup("fit")
    ds, seen_special, masked, total = dm.datasets["train"], 0, 0, 0
    ds.random = False  # windows at known offsets k * 24, so the original tokens are known
    for k in range(len(ds)):
        ex = ds[k]
        original = stream[k * 24 : k * 24 + 24]
        inputs, labels = ex["input_ids"].numpy(), ex["labels"].numpy()
        special = np.isin(original, tok.special_ids)
        seen_special += special.sum()
        assert (labels[special] == IGNORE_INDEX).all() and (inputs[special] == original[special]).all()
        picked = labels != IGNORE_INDEX
        assert (labels[picked] == original[picked]).all()
        # random ids never special
        assert not np.isin(inputs[picked & (inputs != 103)], [0, 100, 101, 102]).any()
        masked, total = masked + (inputs[picked] == 103).sum(), total + picked.sum()
    assert seen_special >= 4 and masked / total > 0.6


def test_seq2seq_t5_targets_end_with_eos_and_start_with_pad(folders, auto, tmp_path):
    pairs = [(a, b) for a, b in zip(corpus(80, seed=2), corpus(80, seed=3), strict=True)]
    (tmp_path / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    tok, dm = build_data({"name": "pairs", "path": str(tmp_path / "pairs.tsv")},
                         {"name": "hf", "path": str(folders["t5"])}, task="seq2seq", max_seq_len=64,
                         batch_size=4, cache_dir=tmp_path / "cache")
    dm.setup("fit")
    ref = auto["t5"]
    by_ids = {tuple(ref(s, add_special_tokens=False).input_ids): (s, t) for s, t in pairs}
    ds = dm.datasets["train"]
    for i in range(5):
        src, tgt = by_ids[tuple(np.asarray(ds.src[i]).tolist())]
        ex = ds[i]
        assert ex["input_ids"].tolist() == ref(src).input_ids  # source </s>
        assert ex["labels"].tolist() == ref(tgt).input_ids and ex["labels"][-1] == 1  # target </s>
        assert ex["decoder_input_ids"].tolist() == [0, *ref(tgt).input_ids[:-1]]  # <pad> target
    batch = next(iter(dm.train_dataloader()))
    assert (batch["input_ids"][batch["attention_mask"] == 0] == 0).all()  # padded with <pad>


def test_seq2seq_truncation_keeps_the_closing_eos(toks):
    t5 = toks["t5"]
    dec, labels = t5.specials.target(list(range(10, 30)), max_len=8)
    assert labels.tolist() == [*range(10, 17), 1] and dec.tolist() == [0, *range(10, 17)]
    assert t5.specials.source(list(range(10, 30)), max_len=8).tolist() == [*range(10, 17), 1]


@pytest.mark.parametrize("kind, first", [("bert", 101), ("roberta", 0)])
def test_classification_starts_with_cls(kind, first, folders, auto, tmp_path):
    rows = [{"text": text, "label": "pos" if i % 2 else "neg"} for i, text in enumerate(corpus(40, seed=4))]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                      encoding="utf-8")
    tok, dm = build_data({"name": "classification", "path": str(tmp_path / "c.jsonl")},
                         {"name": "hf", "path": str(folders[kind])}, task="classification", max_seq_len=64,
                         batch_size=4, cache_dir=tmp_path / "cache")
    dm.setup("fit")
    ref = auto[kind]
    by_ids = {tuple(ref(r["text"], add_special_tokens=False).input_ids): r["text"] for r in rows}
    ds = dm.datasets["train"]
    for i in range(5):
        text = by_ids[tuple(np.asarray(ds.texts[i]).tolist())]
        ids = ds[i]["input_ids"].tolist()
        assert ids[0] == first and ids == ref(text).input_ids  # [CLS] x [SEP] / <s> x </s>
    assert dm.collate.pad_id == ref.pad_token_id


def test_mask_tokens_with_foreign_special_ids():
    """Hand-checked: specials anywhere in the vocabulary (BERT's 0, 101, 102) are never picked, and random
    replacements are drawn from the non-special ids only."""
    ids = np.array([101, 5, 6, 7, 102, 0, 0])
    rng = np.random.default_rng(0)
    for _ in range(50):
        inputs, labels = mask_tokens(ids, rng, prob=0.999, mask_id=103, vocab_size=104,
                                     special_ids=[0, 101, 102, 103])
        assert (labels == [IGNORE_INDEX, 5, 6, 7, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]).all()
        assert (inputs[[0, 4, 5, 6]] == [101, 102, 0, 0]).all()
        assert not np.isin(inputs[1:4], [0, 101, 102]).any() and (inputs[1:4] < 104).all()
    drawn = mask_tokens(np.ones(300, dtype=np.int64), np.random.default_rng(1), prob=0.999, mask_id=3,
                        vocab_size=6, special_ids=[0, 2, 3])[0]
    assert set(drawn.tolist()) == {1, 3, 4, 5}  # kept 1, the mask 3, random 1/4/5: never 0 or 2


# ------------------------------------------------------------------------------------------- bad input


def _copy(src, dst, *names):
    dst.mkdir()
    for name in names:
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_bad_folders_give_one_clear_error(folders, tmp_path):
    gpt2 = folders["gpt2"]
    cases = {
        tmp_path / "missing": (FileNotFoundError, "does not exist; expected a Hugging Face tokenizer folder"),
        gpt2 / "tokenizer.json": (FileNotFoundError, "is a file; expected a Hugging Face tokenizer folder"),
        _copy(gpt2, tmp_path / "no_json", "tokenizer_config.json"): (
            FileNotFoundError, "has no tokenizer.json"),
        _copy(gpt2, tmp_path / "no_config", "tokenizer.json"): (
            FileNotFoundError, "neither tokenizer_config.json nor special_tokens_map.json"),
    }
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "vocab.txt").write_text("[PAD]\n")
    (slow / "tokenizer_config.json").write_text("{}")
    cases[slow] = (FileNotFoundError, r"only a slow tokenizer \(vocab.txt\).*save_pretrained")
    corrupt = _copy(gpt2, tmp_path / "corrupt", "tokenizer_config.json")
    (corrupt / "tokenizer.json").write_text('{"model": ')
    cases[corrupt] = (ValueError, "corrupt tokenizer file .*tokenizer.json")
    bad_config = _copy(gpt2, tmp_path / "bad_config", "tokenizer.json")
    (bad_config / "tokenizer_config.json").write_text("{not json")
    cases[bad_config] = (ValueError, "corrupt tokenizer config .*tokenizer_config.json")
    absent = _copy(gpt2, tmp_path / "absent", "tokenizer.json")
    (absent / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    cases[absent] = (ValueError, r"eos_token '<\|im_end\|>' is not in the vocabulary")
    for path, (error, message) in cases.items():
        with pytest.raises(error, match=message) as info:
            load_hf_tokenizer(path)
        assert str(path) in str(info.value)


def test_config_check_names_the_key_before_any_data_is_read(tmp_path):
    with pytest.raises(ValueError, match=r"tokenizer.path='.*nowhere': .*nowhere does not exist"):
        validate_tokenizer_cfg({"name": "hf", "path": str(tmp_path / "nowhere")})
    with pytest.raises(ValueError, match="tokenizer=hf needs tokenizer.path"):
        validate_tokenizer_cfg({"name": "hf"})


def test_task_refuses_a_tokenizer_without_the_token_it_needs(folders, tmp_path):
    _write_text_files(tmp_path / "text")
    with pytest.raises(ValueError, match=r"task=mlm needs a mask token, but the tokenizer .* has none"):
        build_data({"name": "text", "files": str(tmp_path / "text" / "*.txt")},
                   {"name": "hf", "path": str(folders["gpt2"])}, task="mlm", max_seq_len=16, batch_size=2,
                   cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/manifest.json"))  # refused before anything was cached
