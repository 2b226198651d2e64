"""The tokenizer object: a Hugging Face ``tokenizers`` object and its special tokens, saved and loaded.

zoo's own kinds (bpe, char, file: zoo/tokenizers/trained.py, saved.py) have the special tokens
``<pad>=0 <bos>=1 <eos>=2 <unk>=3 <mask>=4`` at fixed ids; a Hugging Face folder (``tokenizer=hf``,
zoo/tokenizers/hf.py) keeps its own tokens and ids. Either way the ids are properties of the instance
(``tok.pad_id``..., ``None`` where the tokenizer has none) and ``tok.specials`` frames sequences for each
task. ``encode`` adds no special tokens; literal text such as ``"<pad>"`` is encoded as ordinary text, never
as a special id. Padding and truncation stored in a ``tokenizer.json`` never apply (transformers' fast
tokenizers ignore them too unless a call asks), so a text always keeps all of its tokens.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from zoo.atomic import atomic_write_bytes, atomic_write_json
from zoo.tokenizers import chat
from zoo.tokenizers.chat import DEFAULT_CHAT_TEMPLATE, ChatTemplate
from zoo.tokenizers.specials import SpecialTokens, specials_from_roles
from zoo.tokenizers.tiling import encode_texts

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>", "<mask>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID, MASK_ID = range(len(SPECIAL_TOKENS))
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "zoo_tokenizer.json"
LABELS_FILE = "labels.json"
HF_CONFIG_FILE = "tokenizer_config.json"  # a Hugging Face folder's special tokens (zoo/tokenizers/hf.py)
HF_SPECIAL_MAP_FILE = "special_tokens_map.json"
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
    ``clean_up_tokenization_spaces`` does (a Hugging Face folder's setting; off for zoo's own kinds).
    ``chat_template``: a folder's Jinja chat template(s) (zoo/tokenizers/chat.py); zoo's own kinds default to
    ``DEFAULT_CHAT_TEMPLATE``, a Hugging Face folder without one has None."""

    def __init__(self, hf: HFTokenizer, kind: str, label_names: Sequence[str] | None = None,
                 specials: SpecialTokens | None = None, clean_up_spaces: bool = False,
                 chat_template: ChatTemplate | None = None) -> None:
        if specials is None:
            check_special_tokens(hf, source=f"{kind} tokenizer")
        hf.encode_special_tokens = True  # "<pad>" in user text is text, not a special token
        self.hf = without_stored_padding(hf)
        self.kind = kind
        self.specials = ZOO_SPECIALS if specials is None else specials
        self.label_names = list(label_names) if label_names is not None else None
        self.clean_up_spaces = clean_up_spaces
        own = specials is None and chat_template is None  # zoo's own kinds: the default template
        self.chat_template = DEFAULT_CHAT_TEMPLATE if own else chat_template

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

    def chat_ids(self, messages: Any, *, add_generation_prompt: bool | None = None,
                 continue_final_message: bool = False) -> list[int]:
        """Ids of a conversation under this tokenizer's chat template, as transformers'
        ``apply_chat_template`` gives them (zoo/tokenizers/chat.py): special-token text the template wrote
        (``<|im_start|>``) becomes its token, and nothing is added around the text, so a BOS the template
        writes is the only one."""
        return self.encode_chat(self.chat_text(messages, add_generation_prompt=add_generation_prompt,
                                               continue_final_message=continue_final_message))

    def chat_text(self, messages: Any, *, add_generation_prompt: bool | None = None,
                  continue_final_message: bool = False, template: str | None = None) -> str:
        """The text of a conversation under this tokenizer's chat template (``template``: one of its named
        ones, else the default). ``continue_final_message``: the text ends inside the last message (no
        end-of-turn), for the model to continue it; a generation prompt is added otherwise (by default)."""
        if self.chat_template is None:
            raise ValueError(f"this {self.kind} tokenizer has no chat template ({chat.CHAT_TEMPLATE_FILE} or "
                             "tokenizer_config.json's chat_template in its Hugging Face folder); "
                             "chat needs one")
        chosen = self.chat_template if template is None else chat.named_template(self.chat_template, template)
        return chat.render_chat(chosen, chat.check_messages(messages), self.specials.tokens,
                                add_generation_prompt=add_generation_prompt,
                                continue_final_message=continue_final_message)

    def encode_chat(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Ids of a rendered chat: its special-token text (``<|im_start|>``, ``<bos>``) as those tokens, as
        transformers encodes it (``encode`` keeps such text as text); ``add_special_tokens`` adds what the
        tokenizer adds around a text (a Llama BOS), off by default since the template writes its own."""
        return self._specials_as_tokens.encode(text, add_special_tokens=add_special_tokens).ids

    def chat_encoding(self, text: str) -> Any:
        """``encode_chat``'s tokenizers ``Encoding`` of a rendered chat (ids and character offsets: what a
        loss mask over the chat's spans is read from)."""
        return self._specials_as_tokens.encode(text, add_special_tokens=False)

    @cached_property
    def _specials_as_tokens(self) -> HFTokenizer:
        """A copy of ``hf`` that matches special-token text (``encode`` keeps it as text); a copy, not a flag
        flipped and restored, so threads encoding at once never see each other's setting."""
        copy = HFTokenizer.from_str(self.hf.to_str())
        copy.encode_special_tokens = False
        return copy

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def encode_long(self, text: str) -> list[int]:
        """``encode(text)``'s ids, computed in bounded windows of the text (zoo.tokenizers.tiling), so a text
        of any length takes bounded memory per call and the windows encode in parallel."""
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
        if self.chat_template not in (None, DEFAULT_CHAT_TEMPLATE):
            meta["chat_template"] = self.chat_template
        atomic_write_json(directory / META_FILE, meta)
        if self.label_names is not None:
            atomic_write_json(directory / LABELS_FILE, self.label_names)
        return directory

    def save_hf(self, directory: str | os.PathLike) -> Path:
        """Write a Hugging Face tokenizer folder (``tokenizer.json``, ``tokenizer_config.json``,
        ``special_tokens_map.json``, each atomically) that ``transformers.AutoTokenizer.from_pretrained``
        loads with the same ids as this tokenizer. The config names the generic fast class, so transformers
        uses ``tokenizer.json`` as it is, and ``split_special_tokens`` so special-token text in input stays
        text. A folder's chat template (not zoo's default) is written too, and then ``split_special_tokens``
        is off, as in the folder it came from: transformers' ``apply_chat_template`` encodes the template's
        output with that setting, and split, the control tokens it writes would become text."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        named = {f"{role}_token": token for role, token in self.specials.tokens.items() if token is not None}
        template = None if self.chat_template == DEFAULT_CHAT_TEMPLATE else self.chat_template
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **named,
                  "split_special_tokens": template is None,
                  "clean_up_tokenization_spaces": self.clean_up_spaces}
        if template is not None:  # transformers' forms: one string, or [{"name", "template"}, ...]
            config["chat_template"] = template if isinstance(template, str) else [
                {"name": name, "template": text} for name, text in template.items()]
        atomic_write_bytes(directory / TOKENIZER_FILE, self.hf.to_str().encode("utf-8"))
        atomic_write_json(directory / HF_CONFIG_FILE, config)
        atomic_write_json(directory / HF_SPECIAL_MAP_FILE, named)
        return directory

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
    """``hf`` with the padding and truncation a ``tokenizer.json`` may store switched off
    (sentence-transformers' files pad and cut every text to 128 ids); transformers applies them only when a
    call asks, zoo never."""
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
    kind, labels, specials, clean_up, template = "file", None, None, False, None
    if (directory / META_FILE).is_file():
        meta = read_json(directory / META_FILE)
        kind, clean_up = meta.get("kind", "file"), bool(meta.get("clean_up_spaces", False))
        template = meta.get("chat_template")
        if "roles" in meta:  # saved from a Hugging Face folder: its own special tokens
            extra = meta.get("special_tokens", {})
            specials = specials_from_roles(hf, meta["roles"], extra, directory / META_FILE)
    if (directory / LABELS_FILE).is_file():
        labels = read_json(directory / LABELS_FILE)
    return ZooTokenizer(hf, kind=kind, label_names=labels, specials=specials, clean_up_spaces=clean_up,
                        chat_template=template)


def read_json(path: Path, what: str = "metadata") -> Any:
    """The JSON in ``path``; a corrupt file raises ValueError (``corrupt tokenizer <what> <path>: ...``)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt tokenizer {what} {path}: {e}") from None


def model_overrides(tokenizer: ZooTokenizer) -> dict[str, int]:
    """Model-config fields that come from the tokenizer: the vocabulary size and special ids (a labelled
    task sets its head's num_labels from `label_names` itself)."""
    return {"vocab_size": tokenizer.vocab_size, **tokenizer.specials.model_ids()}  # pad/bos/eos (+ start)
