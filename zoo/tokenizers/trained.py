"""The tokenizers zoo trains on the training split: byte-level BPE (``tokenizer=bpe``, the default) and
character-level (``tokenizer=char``), both with zoo's special tokens at the fixed ids 0-4."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from zoo.options import integer, optional
from zoo.tokenizers.registry import register_tokenizer
from zoo.tokenizers.tokenizer import SPECIAL_TOKENS, ZooTokenizer

BYTE_ALPHABET_SIZE = 256
BPE_MIN_VOCAB = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
CHAR_MIN_VOCAB = 6  # the special tokens and one character
CHUNK_CHARS = 1024  # longest piece handed to the BPE trainer (a huge line must not hang it); encoding cuts
# documents as zoo.tokenizers.tiling says

# tokenizer.train_bytes of a trained tokenizer: the UTF-8 bytes of training text it sees, a seeded sample
# drawn by zoo.data.build.tokenizer_sample before the builder is called (null = the whole training split)
TRAIN_BYTES = optional(integer(1))
DEFAULT_TRAIN_BYTES = 100_000_000


def chunk_text(text: str, max_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """Split text into pieces of at most ``max_chars``, cutting after a newline when one is near: what BPE
    training counts words in (a word cut at a piece's end adds one rare fragment to the counts; encoding never
    cuts this way, see zoo.tokenizers.tiling)."""
    start, n = 0, len(text)
    while start < n:
        end = min(start + max_chars, n)
        if end < n:
            cut = text.rfind("\n", start, end)
            if cut >= start + max_chars // 2:
                end = cut + 1
        yield text[start:end]
        start = end


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
    hf.train_from_iterator((c for text in texts for c in chunk_text(text)), trainer=trainer)
    return ZooTokenizer(hf, kind="bpe")


@register_tokenizer("char")
def train_char(texts: Sequence[str], *, vocab_size: Annotated[int | None, _CHAR_VOCAB] = None,
               train_bytes: Annotated[int | None, TRAIN_BYTES] = DEFAULT_TRAIN_BYTES) -> ZooTokenizer:
    """One token per Unicode character seen in ``texts``; unseen characters map to ``<unk>``."""
    del train_bytes  # ``texts`` is already the bounded sample (zoo.data.build.tokenizer_sample)
    alphabet = sorted(set().union(*texts))  # every character seen
    needed = len(alphabet) + len(SPECIAL_TOKENS)
    if vocab_size is not None and vocab_size < needed:
        raise ValueError(
            f"tokenizer.vocab_size={vocab_size} is smaller than the alphabet ({len(alphabet)} characters) "
            f"+ {len(SPECIAL_TOKENS)} special tokens = {needed}; use vocab_size=null or >= {needed}"
        )
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *alphabet])}  # specials at ids 0-4
    hf = HFTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    hf.decoder = decoders.Fuse()
    hf.add_special_tokens(list(SPECIAL_TOKENS))
    return ZooTokenizer(hf, kind="char")
