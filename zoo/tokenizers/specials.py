"""Which ids a tokenizer reserves, and how it frames a sequence with them for each task.

zoo's own tokenizers reserve ``<pad>=0 <bos>=1 <eos>=2 <unk>=3 <mask>=4`` and add nothing around text; a
Hugging Face tokenizer keeps its own (GPT-2: ``<|endoftext|>`` as bos/eos/unk and no pad; BERT:
``[CLS] x [SEP]``; T5: ``x </s>``, no bos; RoBERTa/BART: ``<s> x </s>``). The data pipeline asks a
:class:`SpecialTokens` for the ids and layouts instead of assuming fixed numbers.

Fallbacks where a tokenizer lacks a role (documented in docs/data.md):

- padding: ``pad``, else ``eos``, else 0 (padded positions are masked out and their labels are -100);
- document end (LM/MLM streams): the template's closing token, else ``eos``, else ``sep``;
- decoder start (seq2seq): ``bos``, else the padding id (T5);
- classification's first token: ``cls``, else ``bos``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

ROLES: tuple[str, ...] = ("pad", "bos", "eos", "unk", "mask", "cls", "sep")
PROBES = ("a", "hello world 1")  # texts encoded once to see which specials the template adds around them


@dataclass(frozen=True)
class SpecialTokens:
    """Role -> id (``None`` where the tokenizer has no such token), every special id, and the ids the
    tokenizer's template puts before (``prefix``) and after (``suffix``) one sequence."""

    ids: Mapping[str, int | None]
    all_ids: tuple[int, ...]
    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()
    tokens: Mapping[str, str | None] = field(default_factory=dict)  # role -> token text

    def __post_init__(self) -> None:
        unknown = set(self.ids) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown special-token roles {sorted(unknown)}; known: {list(ROLES)}")
        object.__setattr__(self, "ids", {role: self.ids.get(role) for role in ROLES})
        named = {i for i in self.ids.values() if i is not None}
        every = named | set(self.all_ids) | set(self.prefix) | set(self.suffix)
        object.__setattr__(self, "all_ids", tuple(sorted(every)))

    @classmethod
    def plain(cls, **ids: int | None) -> SpecialTokens:
        """Specials with no template (zoo's tokenizers): ``SpecialTokens.plain(pad=0, bos=1, eos=2)``."""
        return cls(ids=ids, all_ids=())

    def __getitem__(self, role: str) -> int | None:
        return self.ids[role]

    # ------------------------------------------------------------------------------- fallbacks
    @property
    def padding_id(self) -> int:
        """The id batches are padded with: pad, else eos, else 0 (pads are masked and labelled -100)."""
        return next((i for i in (self.ids["pad"], self.ids["eos"]) if i is not None), 0)

    @property
    def decoder_start_id(self) -> int:
        """First decoder input of a seq2seq target: bos, else the padding id (T5 starts with <pad>)."""
        return self.ids["bos"] if self.ids["bos"] is not None else self.padding_id

    @property
    def document_end_id(self) -> int | None:
        """The id that closes each document of an LM/MLM stream: eos, else sep (None: neither)."""
        return self.ids["eos"] if self.ids["eos"] is not None else self.ids["sep"]

    @property
    def first_id(self) -> int | None:
        """The id classification puts first (the classifier pools position 0): cls, else bos."""
        return self.ids["cls"] if self.ids["cls"] is not None else self.ids["bos"]

    def model_ids(self) -> dict[str, int]:
        """ModelConfig fields: pad/bos/eos ids with the fallbacks above (bos: else cls, else the decoder
        start; eos: else sep, else padding), and ``decoder_start_id`` only when it is not that bos
        (ModelConfig's default start is bos_id, so zoo's own tokenizers leave it unset as before)."""
        bos = next((i for i in (self.ids["bos"], self.ids["cls"]) if i is not None), self.decoder_start_id)
        out = {
            "pad_id": self.padding_id,
            "bos_id": bos,
            "eos_id": self.padding_id if self.document_end_id is None else self.document_end_id,
        }
        if self.decoder_start_id != bos:
            out["decoder_start_id"] = self.decoder_start_id
        return out

    # -------------------------------------------------------------------------------- framing
    def frame(self, ids: Sequence[int] | np.ndarray, max_len: int | None = None, *, first: int | None = None,
              last: int | None = None) -> np.ndarray:
        """``prefix + ids + suffix`` as int64, the content cut so the whole fits ``max_len``;
        ``first``/``last`` are put at the ends when the template does not already start/end with them."""
        head = list(self.prefix) if first is None or self.prefix[:1] == (first,) else [first, *self.prefix]
        tail = list(self.suffix) if last is None or self.suffix[-1:] == (last,) else [*self.suffix, last]
        body = np.asarray(ids, dtype=np.int64)
        if max_len is not None:
            room = max_len - len(head) - len(tail)
            if room < 0:
                raise ValueError(f"max_seq_len={max_len} is shorter than the tokenizer's "
                                 f"{len(head) + len(tail)} special tokens around each sequence")
            body = body[:room]
        return np.concatenate([np.asarray(head, dtype=np.int64), body, np.asarray(tail, dtype=np.int64)])

    def document_ends(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(ids before, ids after) each document of an LM/MLM stream: the tokenizer's template, closed by its
        document end (zoo: ``((), (eos,))``; GPT-2: ``((), (<|endoftext|>,))``; BERT: ``([CLS], [SEP])``)."""
        if self.suffix:
            return self.prefix, self.suffix
        if self.document_end_id is None:
            raise ValueError("the tokenizer has no eos or sep token to end documents with")
        return self.prefix, (self.document_end_id,)

    def source(self, ids: Sequence[int] | np.ndarray, max_len: int) -> np.ndarray:
        """Encoder input of a seq2seq pair (T5: ``x </s>``; BART: ``<s> x </s>``; zoo: ``x``)."""
        return self.frame(ids, max_len)

    def target(self, ids: Sequence[int] | np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
        """``(decoder_input_ids, labels)`` of a seq2seq target: labels are the framed target ending with eos,
        decoder inputs the same shifted right behind the decoder start id."""
        if self.ids["eos"] is None:
            raise ValueError("the tokenizer has no eos token to end seq2seq targets with")
        labels = self.frame(ids, max_len, last=self.ids["eos"])
        return np.concatenate([[self.decoder_start_id], labels[:-1]]).astype(np.int64), labels

    def classification(self, ids: Sequence[int] | np.ndarray, max_len: int) -> np.ndarray:
        """Classifier input: the template with :attr:`first_id` at position 0 (BERT ``[CLS] x [SEP]``)."""
        if self.first_id is None:
            raise ValueError("the tokenizer has no cls or bos token to put first for classification")
        return self.frame(ids, max_len, first=self.first_id)


def specials_from_roles(hf: HFTokenizer, roles: Mapping[str, str | None], extra: Iterable[str],
                        source: str | os.PathLike) -> SpecialTokens:
    """The ids of the named tokens in ``hf`` (each must be in its vocabulary), every special id (named,
    additional, and tokens ``tokenizer.json`` marks special) and the template around one sequence."""
    ids: dict[str, int | None] = {}
    for role, token in roles.items():
        if role not in ROLES:
            raise ValueError(f"{source}: unknown special-token role {role!r}; known: {list(ROLES)}")
        ids[role] = None if token is None else _id_of(hf, token, source, f"{role}_token")
    extra_ids = [_id_of(hf, token, source, "additional special token") for token in extra]
    marked = [i for i, added in hf.get_added_tokens_decoder().items() if added.special]
    prefix, suffix = _template(hf)
    return SpecialTokens(ids=ids, all_ids=(*extra_ids, *marked), prefix=prefix, suffix=suffix,
                         tokens={r: roles.get(r) for r in ROLES})


def _template(hf: HFTokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The special ids the tokenizer's post-processor puts before and after one sequence (the ids around
    the first probe text it encodes to some content)."""
    for probe in PROBES:
        enc = hf.encode(probe, add_special_tokens=True)
        content = [k for k, special in enumerate(enc.special_tokens_mask) if not special]
        if content:
            return tuple(enc.ids[: content[0]]), tuple(enc.ids[content[-1] + 1 :])
    return (), ()


def _id_of(hf: HFTokenizer, token: str, source: str | os.PathLike, what: str) -> int:
    found = hf.token_to_id(token)
    if found is None:
        raise ValueError(f"{source}: {what} {token!r} is not in the vocabulary of its tokenizer.json")
    return found
