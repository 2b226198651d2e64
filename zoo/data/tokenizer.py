"""Tokenizers: byte-level BPE (default), character-level, a ``tokenizer.json`` file, or a Hugging Face
tokenizer folder (``tokenizer=hf``, zoo/data/hf_tokenizer.py).

All are Hugging Face ``tokenizers`` objects wrapped by :class:`ZooTokenizer`. zoo's own (bpe, char, file)
have the special tokens ``<pad>=0 <bos>=1 <eos>=2 <unk>=3 <mask>=4`` at fixed ids; a Hugging Face folder
keeps its own tokens and ids. Either way the ids are properties of the instance (``tok.pad_id``...,
``None`` where the tokenizer has none) and ``tok.specials`` frames sequences for each task. ``encode``
adds no special tokens; literal text such as ``"<pad>"`` is encoded as ordinary text, never as a special id.
Padding and truncation stored in a ``tokenizer.json`` never apply (transformers' fast tokenizers ignore them too
unless a call asks), so a text always keeps all of its tokens.

Registry: ``TOKENIZERS.get(name)(texts, **cfg) -> ZooTokenizer`` where ``texts`` is the training split;
each builder's keyword parameters are the ``tokenizer.*`` keys and their hints the values allowed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from zoo.data.cache import atomic_write_bytes, atomic_write_json
from zoo.data.specials import SpecialTokens
from zoo.data.tiling import encode_texts
from zoo.options import TEXT, Options, check_entry, integer, optional
from zoo.registry import Registry

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>", "<mask>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID, MASK_ID = range(len(SPECIAL_TOKENS))
BYTE_ALPHABET_SIZE = 256
CHUNK_CHARS = 1024  # longest piece handed to the BPE trainer (a huge line must not hang it); encoding cuts
# documents as zoo.data.tiling says
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "zoo_tokenizer.json"
LABELS_FILE = "labels.json"
ZOO_SPECIALS = SpecialTokens(
    ids={"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID, "mask": MASK_ID},
    all_ids=tuple(range(len(SPECIAL_TOKENS))),
    tokens={"pad": "<pad>", "bos": "<bos>", "eos": "<eos>", "unk": "<unk>", "mask": "<mask>"},
)


class ZooTokenizer:
    """A tokenizer and its special tokens; optionally carries classification label names.

    ``specials=None`` (zoo's own kinds) means the fixed ids 0-4, checked against ``hf``; a Hugging Face
    folder passes the :class:`SpecialTokens` read from its config (``load_hf_tokenizer``).
    ``clean_up_spaces``: decode removes the space before punctuation and contractions as transformers'
    ``clean_up_tokenization_spaces`` does (a Hugging Face folder's setting; off for zoo's own kinds)."""

    def __init__(self, hf: HFTokenizer, kind: str, label_names: Sequence[str] | None = None,
                 specials: SpecialTokens | None = None, clean_up_spaces: bool = False) -> None:
        if specials is None:
            check_special_tokens(hf, source=f"{kind} tokenizer")
        hf.encode_special_tokens = True  # "<pad>" in user text is text, not a special token
        self.hf = without_stored_padding(hf)
        self.kind = kind
        self.specials = ZOO_SPECIALS if specials is None else specials
        self.label_names = list(label_names) if label_names is not None else None
        self.clean_up_spaces = clean_up_spaces

    # special ids of this tokenizer; None where it has no such token (GPT-2 has no pad, BERT no bos/eos)
    pad_id = property(lambda self: self.specials["pad"])
    bos_id = property(lambda self: self.specials["bos"])
    eos_id = property(lambda self: self.specials["eos"])
    unk_id = property(lambda self: self.specials["unk"])
    mask_id = property(lambda self: self.specials["mask"])
    cls_id = property(lambda self: self.specials["cls"])
    sep_id = property(lambda self: self.specials["sep"])

    @property
    def padding_id(self) -> int:
        """The id batches are padded with: pad_id, else eos_id (GPT-2), else 0; pads are masked and -100."""
        return self.specials.padding_id

    @property
    def decoder_start_id(self) -> int:
        """The first decoder input of a seq2seq target: bos_id, else padding_id (T5)."""
        return self.specials.decoder_start_id

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    @property
    def special_ids(self) -> tuple[int, ...]:
        """Every special id (MLM never masks these)."""
        return self.specials.all_ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without any special tokens added."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def encode_long(self, text: str) -> list[int]:
        """``encode(text)``'s ids, computed in bounded windows of the text (zoo.data.tiling), so a text of any
        length takes bounded memory per call and the windows encode in parallel."""
        return encode_texts(self.hf, [text])[0]

    def decode(self, ids: Sequence[int] | Any, skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (a list or a 1-D tensor/array)."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        text = self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if self.clean_up_spaces else text

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``tokenizer.json``, ``zoo_tokenizer.json`` and (if any) ``labels.json`` atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(directory / TOKENIZER_FILE, self.hf.to_str().encode("utf-8"))
        if self.specials is ZOO_SPECIALS:
            meta = {"kind": self.kind, "special_tokens": dict(zip(SPECIAL_TOKENS, range(5), strict=True))}
        else:  # a foreign tokenizer: its role -> token text, read back by load_tokenizer
            meta = {"kind": self.kind, "roles": dict(self.specials.tokens),
                    "special_tokens": {self.hf.id_to_token(i): i for i in self.special_ids}}
        if self.clean_up_spaces:
            meta["clean_up_spaces"] = True
        atomic_write_json(directory / META_FILE, meta)
        if self.label_names is not None:
            atomic_write_json(directory / LABELS_FILE, self.label_names)
        return directory

    def save_hf(self, directory: str | os.PathLike) -> Path:
        """Write a Hugging Face tokenizer folder (``tokenizer.json``, ``tokenizer_config.json``,
        ``special_tokens_map.json``) that ``transformers.AutoTokenizer.from_pretrained`` loads with the same
        ids as this tokenizer (special-token text in input stays text there too: ``split_special_tokens``)."""
        from zoo.data.hf_tokenizer import write_hf_folder

        return write_hf_folder(self, directory)

    def __repr__(self) -> str:
        return f"ZooTokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"


def check_special_tokens(hf: HFTokenizer, source: str) -> None:
    """Raise ValueError unless every special token sits at its fixed id."""
    wrong = [
        f"{tok}: expected id {i}, found {hf.token_to_id(tok)}"
        for i, tok in enumerate(SPECIAL_TOKENS)
        if hf.token_to_id(tok) != i
    ]
    if wrong:
        raise ValueError(f"{source}: special tokens must have fixed ids; " + "; ".join(wrong))


def read_hf_tokenizer(path: Path) -> HFTokenizer:
    """Load a ``tokenizer.json``; missing -> FileNotFoundError, corrupt -> ValueError (both name it)."""
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    try:
        hf = HFTokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception for malformed JSON
        raise ValueError(f"corrupt tokenizer file {path}: {e}") from None
    return without_stored_padding(hf)


def without_stored_padding(hf: HFTokenizer) -> HFTokenizer:
    """``hf`` with the padding and truncation a ``tokenizer.json`` may store switched off (sentence-transformers'
    files pad and cut every text to 128 ids); transformers applies them only when a call asks, zoo never."""
    hf.no_padding()
    hf.no_truncation()
    return hf


CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # transformers' clean_up_tokenization, in order


def clean_up_tokenization(text: str) -> str:
    """Decoded text without the spaces a WordPiece decode leaves before punctuation and contractions."""
    for before, after in CLEAN_UP:
        text = text.replace(before, after)
    return text


def load_tokenizer(directory: str | os.PathLike) -> ZooTokenizer:
    """Load a tokenizer written by :meth:`ZooTokenizer.save` (or a bare ``tokenizer.json`` path)."""
    directory = Path(directory)
    if directory.is_file():
        return ZooTokenizer(read_hf_tokenizer(directory), kind="file")
    if not directory.is_dir():
        raise FileNotFoundError(f"tokenizer directory not found: {directory}")
    hf = read_hf_tokenizer(directory / TOKENIZER_FILE)
    kind, labels, specials, clean_up = "file", None, None, False
    if (directory / META_FILE).is_file():
        meta = _read_json(directory / META_FILE)
        kind, clean_up = meta.get("kind", "file"), bool(meta.get("clean_up_spaces", False))
        if "roles" in meta:  # saved from a Hugging Face folder: its own special tokens
            from zoo.data.hf_tokenizer import specials_from_roles

            specials = specials_from_roles(hf, meta["roles"], meta.get("special_tokens", {}), directory / META_FILE)
    if (directory / LABELS_FILE).is_file():
        labels = _read_json(directory / LABELS_FILE)
    return ZooTokenizer(hf, kind=kind, label_names=labels, specials=specials, clean_up_spaces=clean_up)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt tokenizer metadata {path}: {e}") from None


def chunk_text(text: str, max_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """Split text into pieces of at most ``max_chars``, cutting after a newline when one is near: what BPE
    training counts words in (a word cut at a piece's end adds one rare fragment to the counts; encoding never
    cuts this way, see zoo.data.tiling)."""
    start, n = 0, len(text)
    while start < n:
        end = min(start + max_chars, n)
        if end < n:
            cut = text.rfind("\n", start, end)
            if cut >= start + max_chars // 2:
                end = cut + 1
        yield text[start:end]
        start = end


def _chunks(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        yield from chunk_text(text)


# ---------------------------------------------------------------------------------------- registry

TokenizerBuilder = Callable[..., ZooTokenizer]
TOKENIZERS: Registry[TokenizerBuilder] = Registry("tokenizer", key="tokenizer.name")
BPE_MIN_VOCAB = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
CHAR_MIN_VOCAB = 6  # the special tokens and one character


# tokenizer.train_bytes of a trained tokenizer: the UTF-8 bytes of training text it sees, a seeded sample drawn
# by zoo.data.build.tokenizer_sample before the builder is called (null = the whole training split)
TRAIN_BYTES = optional(integer(1))
DEFAULT_TRAIN_BYTES = 100_000_000


def register_tokenizer(name: str) -> Callable[[TokenizerBuilder], TokenizerBuilder]:
    """Decorator: `@register_tokenizer("bpe")` makes ``builder(texts, **options)`` available as
    `tokenizer=bpe`; its keyword parameters are the `tokenizer.*` keys, their hints the allowed values."""
    return TOKENIZERS.register(name)


def tokenizer_options(name: str) -> Options:
    """tokenizer.* keys of tokenizer `name`: its builder's keyword parameters, plus `name`."""
    return Options.of(TOKENIZERS.get(name), skip=("texts",)).extended({"name": TEXT})


def validate_tokenizer_cfg(cfg: Mapping[str, Any]) -> None:
    """Check name, keys and values before any data is read (vocab too small, missing path...)."""
    check_entry("tokenizer", cfg.get("name"), cfg, tokenizer_options, TOKENIZERS)


def build_tokenizer(cfg: dict[str, Any], texts: Sequence[str]) -> ZooTokenizer:
    """Validate ``cfg`` and build the tokenizer named by ``cfg['name']`` from training ``texts``."""
    validate_tokenizer_cfg(cfg)
    kwargs = {k: v for k, v in cfg.items() if k != "name"}
    return TOKENIZERS.get(cfg["name"])(texts, **kwargs)


def _below_bpe_minimum(key: str, value: Any) -> str | None:
    """Why a BPE vocabulary needs BPE_MIN_VOCAB ids (None: not an integer, the plain message says so)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return (f"{key}={value!r} is smaller than the byte alphabet ({BYTE_ALPHABET_SIZE}) + "
            f"{len(SPECIAL_TOKENS)} special tokens = {BPE_MIN_VOCAB}")


_BPE_VOCAB = dataclasses.replace(integer(BPE_MIN_VOCAB), explain=_below_bpe_minimum)
_CHAR_VOCAB = optional(integer(CHAR_MIN_VOCAB))


@register_tokenizer("bpe")
def train_bpe(
    texts: Sequence[str], *, vocab_size: Annotated[int, _BPE_VOCAB] = 4096, min_frequency: int = 2,
    train_bytes: Annotated[int | None, TRAIN_BYTES] = DEFAULT_TRAIN_BYTES,
) -> ZooTokenizer:
    """Byte-level BPE (GPT-2 style): lossless for any UTF-8 text; trained on chunked ``texts``."""
    del train_bytes  # ``texts`` is already the bounded sample (zoo.data.build.tokenizer_sample)
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(_chunks(texts), trainer=trainer)
    return ZooTokenizer(hf, kind="bpe")


@register_tokenizer("char")
def train_char(texts: Sequence[str], *, vocab_size: Annotated[int | None, _CHAR_VOCAB] = None,
               train_bytes: Annotated[int | None, TRAIN_BYTES] = DEFAULT_TRAIN_BYTES) -> ZooTokenizer:
    """One token per Unicode character seen in ``texts``; unseen characters map to ``<unk>``."""
    del train_bytes  # ``texts`` is already the bounded sample (zoo.data.build.tokenizer_sample)
    counts: dict[str, int] = {}
    for text in texts:
        for ch in text:
            counts[ch] = counts.get(ch, 0) + 1
    needed = len(counts) + len(SPECIAL_TOKENS)
    if vocab_size is not None and vocab_size < needed:
        raise ValueError(
            f"tokenizer.vocab_size={vocab_size} is smaller than the alphabet ({len(counts)} characters) "
            f"+ {len(SPECIAL_TOKENS)} special tokens = {needed}; use vocab_size=null or >= {needed}"
        )
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(counts):
        vocab.setdefault(ch, len(vocab))
    hf = HFTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    hf.decoder = decoders.Fuse()
    hf.add_special_tokens(list(SPECIAL_TOKENS))
    return ZooTokenizer(hf, kind="char")


@register_tokenizer("file")
def tokenizer_from_file(texts: Sequence[str], *, path: str) -> ZooTokenizer:
    """A pre-built tokenizer: a ``tokenizer.json`` file or a directory saved by ``ZooTokenizer.save``."""
    del texts  # nothing to train
    return load_tokenizer(path)


def _saved_files(path: Path) -> list[Path]:
    """What ``load_tokenizer(path)`` reads that decides the ids: a bare file, or a saved folder's tokenizer and
    its metadata (special-token roles; ``labels.json`` is not: the data's labels replace it)."""
    if not path.is_dir():
        return [path]
    meta = path / META_FILE
    return [path / TOKENIZER_FILE, meta] if meta.is_file() else [path / TOKENIZER_FILE]


TOKENIZER_FILES: dict[str, Callable[[Path], list[Path]]] = {
    "file": _saved_files,
}  # tokenizer name -> the files its `path` names (a tokenizer read from files registers one here)


def tokenizer_files(cfg: Mapping[str, Any]) -> list[Path]:
    """The files a tokenizer config reads (hashed into the data cache key); [] for a trained tokenizer."""
    files_of = TOKENIZER_FILES.get(cfg["name"])
    return files_of(Path(cfg["path"])) if files_of else []


# tokenizer=hf lives in its own module, which builds on the names above and registers itself on import
from zoo.data.hf_tokenizer import load_hf_tokenizer  # noqa: E402, F401  (re-exported)
