"""Hugging Face tokenizer folders in and out: ``tokenizer=hf tokenizer.path=<folder>``.

``load_hf_tokenizer(folder)`` reads ``tokenizer.json`` with the special tokens that ``tokenizer_config.json``
(and/or ``special_tokens_map.json``) name, keeping their ids (GPT-2's ``<|endoftext|>`` 50256, BERT's
``[CLS] [SEP] [PAD] [MASK] [UNK]``, T5's ``</s> <pad> <unk>``, RoBERTa/BART's ``<s> </s> <pad> <mask>``);
the template ``tokenizer.json`` puts around one sequence (``[CLS] x [SEP]``, ``x </s>``) is kept as well.
The file is read as transformers' fast tokenizer reads it: stored padding and truncation do not apply, the
template is the file's (transformers 5 drops a config's ``add_bos_token`` / ``add_eos_token`` when there is a
``tokenizer.json``), and ``clean_up_tokenization_spaces`` applies to decoding except for a BPE model
(tests/tokenizers/test_tokenizer_parity.py).
``ZooTokenizer.save_hf`` writes such a folder for any zoo tokenizer (zoo/tokenizers/tokenizer.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from tokenizers import Tokenizer as HFTokenizer

from zoo.options import Rule
from zoo.tokenizers.chat import CHAT_TEMPLATE_DIR, CHAT_TEMPLATE_FILE, read_chat_template
from zoo.tokenizers.registry import register_tokenizer
from zoo.tokenizers.specials import ROLES, specials_from_roles
from zoo.tokenizers.tokenizer import (
    HF_CONFIG_FILE,
    HF_SPECIAL_MAP_FILE,
    TOKENIZER_FILE,
    ZooTokenizer,
    read_hf_tokenizer,
    read_json,
)

EXTRA_KEYS = ("additional_special_tokens", "extra_special_tokens")  # transformers 4.x / 5.x names
SLOW_FILES = ("vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model")
EXPECTED = (f"a Hugging Face tokenizer folder with {TOKENIZER_FILE} and {HF_CONFIG_FILE} "
            f"and/or {HF_SPECIAL_MAP_FILE}")


def hf_folder_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not a Hugging Face tokenizer folder (None: it looks like one, unread as yet)."""
    path = Path(path)
    if not path.exists():
        return f"{path} does not exist; expected {EXPECTED}"
    if not path.is_dir():
        return (f"{path} is a file; expected {EXPECTED} (a bare tokenizer.json with zoo's ids is "
                "tokenizer=file)")
    if not (path / TOKENIZER_FILE).is_file():
        slow = [name for name in SLOW_FILES if (path / name).is_file()]
        hint = (f"; it holds only a slow tokenizer ({', '.join(slow)}): save it once with transformers "
                "(AutoTokenizer.from_pretrained(folder).save_pretrained(folder)) to write tokenizer.json"
                ) if slow else ""
        return f"{path} has no {TOKENIZER_FILE}; expected {EXPECTED}{hint}"
    if not any((path / name).is_file() for name in (HF_CONFIG_FILE, HF_SPECIAL_MAP_FILE)):
        return (f"{path} has {TOKENIZER_FILE} but neither {HF_CONFIG_FILE} nor {HF_SPECIAL_MAP_FILE}, "
                "which name its special tokens; expected " + EXPECTED)
    return None


HF_FOLDER = Rule(lambda v: isinstance(v, str) and hf_folder_problem(v) is None, EXPECTED,
                 explain=lambda key, v: f"{key}={v!r}: {hf_folder_problem(v)}" if isinstance(v, str)
                 else None)


def load_hf_tokenizer(path: str | os.PathLike) -> ZooTokenizer:
    """A Hugging Face tokenizer folder as a :class:`ZooTokenizer` of kind ``hf`` with its own special tokens.
    A missing folder or file raises FileNotFoundError, a corrupt one ValueError; both name the path."""
    path = Path(path)
    problem = hf_folder_problem(path)
    if problem is not None:
        raise FileNotFoundError(f"Hugging Face tokenizer: {problem}")
    hf = read_hf_tokenizer(path / TOKENIZER_FILE)
    config = _read_object(path / HF_CONFIG_FILE) if (path / HF_CONFIG_FILE).is_file() else {}
    roles, extra = read_roles(path, config)
    return ZooTokenizer(hf, kind="hf", specials=specials_from_roles(hf, roles, extra, path),
                        clean_up_spaces=decode_cleans_up(hf, config),
                        chat_template=read_chat_template(path, config))


def read_roles(folder: Path, config: Mapping[str, Any]) -> tuple[dict[str, str | None], list[str]]:
    """(role -> token text, additional special tokens) from ``tokenizer_config.json`` (``config``, already
    read), then ``special_tokens_map.json`` for the roles the first leaves unset."""
    roles: dict[str, str | None] = {}
    extra: list[str] = []
    for file in (folder / HF_CONFIG_FILE, folder / HF_SPECIAL_MAP_FILE):
        data = config if file.name == HF_CONFIG_FILE else _read_object(file) if file.is_file() else {}
        for role in ROLES:
            key = f"{role}_token"
            if roles.get(role) is None and key in data:
                roles[role] = _token_text(data[key], file, key)
        for key in EXTRA_KEYS:
            values = data.get(key) or []
            values = list(values.values()) if isinstance(values, Mapping) else values
            extra.extend(t for t in (_token_text(v, file, key) for v in values) if t is not None)
    return roles, extra


def decode_cleans_up(hf: HFTokenizer, config: Mapping[str, Any]) -> bool:
    """Whether transformers' decode of this folder removes spaces before punctuation: the config's
    ``clean_up_tokenization_spaces``, which transformers ignores for a BPE model unless forced."""
    if not config.get("clean_up_tokenization_spaces", False):
        return False
    forced = config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)
    return type(hf.model).__name__ != "BPE" or bool(forced)


def _token_text(value: Any, file: Path, key: str) -> str | None:
    """A special token as written by transformers: a string, ``{"content": ...}`` (AddedToken) or null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"{file}: {key} must be a token string or {{\"content\": ...}}, got {value!r}")


def _read_object(file: Path) -> dict[str, Any]:
    data = read_json(file, "config")
    if not isinstance(data, dict):
        raise ValueError(f"corrupt tokenizer config {file}: expected a JSON object, "
                         f"got {type(data).__name__}")
    return data


def _hf_files(path: Path) -> list[Path]:
    """The files a folder's tokenizer is read from, chat templates included (the data cache keeps the
    tokenizer it was built with, so a changed template must not hit an old entry)."""
    names = (TOKENIZER_FILE, HF_CONFIG_FILE, HF_SPECIAL_MAP_FILE, CHAT_TEMPLATE_FILE)
    named = sorted((path / CHAT_TEMPLATE_DIR).glob("*.jinja")) if (path / CHAT_TEMPLATE_DIR).is_dir() else []
    return [path / name for name in names if (path / name).is_file()] + named


@register_tokenizer("hf", files=_hf_files)
def tokenizer_from_hf(texts: list[str], *, path: Annotated[str, HF_FOLDER]) -> ZooTokenizer:
    """A Hugging Face tokenizer folder with its own special tokens and ids (nothing is trained)."""
    del texts
    return load_hf_tokenizer(path)
