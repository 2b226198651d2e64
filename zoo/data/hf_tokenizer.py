"""Hugging Face tokenizer folders in and out: ``tokenizer=hf tokenizer.path=<folder>``.

``load_hf_tokenizer(folder)`` reads ``tokenizer.json`` with the special tokens that ``tokenizer_config.json``
(and/or ``special_tokens_map.json``) name, keeping their ids (GPT-2's ``<|endoftext|>`` 50256, BERT's
``[CLS] [SEP] [PAD] [MASK] [UNK]``, T5's ``</s> <pad> <unk>``, RoBERTa/BART's ``<s> </s> <pad> <mask>``);
the template ``tokenizer.json`` puts around one sequence (``[CLS] x [SEP]``, ``x </s>``) is kept as well.
The file is read as transformers' fast tokenizer reads it: stored padding and truncation do not apply, the
template is the file's (transformers 5 drops a config's ``add_bos_token`` / ``add_eos_token`` when there is a
``tokenizer.json``), and ``clean_up_tokenization_spaces`` applies to decoding except for a BPE model
(tests/data/test_tokenizer_parity.py).
``write_hf_folder`` (``ZooTokenizer.save_hf``) writes such a folder for any zoo tokenizer, loadable by
``transformers.AutoTokenizer.from_pretrained`` with the same ids.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from tokenizers import Tokenizer as HFTokenizer

from zoo.data.cache import atomic_write_bytes, atomic_write_json
from zoo.data.specials import ROLES, SpecialTokens, template_of, union_ids
from zoo.data.tokenizer import (
    TOKENIZER_FILE,
    TOKENIZER_FILES,
    ZooTokenizer,
    read_hf_tokenizer,
    register_tokenizer,
)
from zoo.options import Rule

CONFIG_FILE = "tokenizer_config.json"
SPECIAL_MAP_FILE = "special_tokens_map.json"
EXTRA_KEYS = ("additional_special_tokens", "extra_special_tokens")  # transformers 4.x / 5.x names
SLOW_FILES = ("vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model")
PROBES = ("a", "hello world 1")  # texts encoded once to see which specials the template adds around them
EXPECTED = (f"a Hugging Face tokenizer folder with {TOKENIZER_FILE} and {CONFIG_FILE} "
            f"and/or {SPECIAL_MAP_FILE}")


def hf_folder_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not a Hugging Face tokenizer folder (None: it looks like one; contents not yet read)."""
    path = Path(path)
    if not path.exists():
        return f"{path} does not exist; expected {EXPECTED}"
    if not path.is_dir():
        return f"{path} is a file; expected {EXPECTED} (a bare tokenizer.json with zoo's ids is tokenizer=file)"
    if not (path / TOKENIZER_FILE).is_file():
        slow = [name for name in SLOW_FILES if (path / name).is_file()]
        hint = (f"; it holds only a slow tokenizer ({', '.join(slow)}): save it once with transformers "
                "(AutoTokenizer.from_pretrained(folder).save_pretrained(folder)) to write tokenizer.json") if slow else ""
        return f"{path} has no {TOKENIZER_FILE}; expected {EXPECTED}{hint}"
    if not any((path / name).is_file() for name in (CONFIG_FILE, SPECIAL_MAP_FILE)):
        return (f"{path} has {TOKENIZER_FILE} but neither {CONFIG_FILE} nor {SPECIAL_MAP_FILE}, which name its "
                "special tokens; expected " + EXPECTED)
    return None


HF_FOLDER = Rule(lambda v: isinstance(v, str) and hf_folder_problem(v) is None, EXPECTED,
                 explain=lambda key, v: f"{key}={v!r}: {hf_folder_problem(v)}" if isinstance(v, str) else None)


def load_hf_tokenizer(path: str | os.PathLike) -> ZooTokenizer:
    """A Hugging Face tokenizer folder as a :class:`ZooTokenizer` of kind ``hf`` with its own special tokens.
    A missing folder or file raises FileNotFoundError, a corrupt one ValueError; both name the path."""
    path = Path(path)
    problem = hf_folder_problem(path)
    if problem is not None:
        raise FileNotFoundError(f"Hugging Face tokenizer: {problem}")
    hf = read_hf_tokenizer(path / TOKENIZER_FILE)
    config = _read_object(path / CONFIG_FILE) if (path / CONFIG_FILE).is_file() else {}
    roles, extra = read_roles(path, config)
    return ZooTokenizer(hf, kind="hf", specials=specials_from_roles(hf, roles, extra, path),
                        clean_up_spaces=decode_cleans_up(hf, config))


def read_roles(folder: Path, config: Mapping[str, Any] | None = None) -> tuple[dict[str, str | None], list[str]]:
    """(role -> token text, additional special tokens) from ``tokenizer_config.json`` (``config`` when already
    read), then ``special_tokens_map.json`` for the roles the first leaves unset."""
    roles: dict[str, str | None] = {}
    extra: list[str] = []
    for file in (folder / CONFIG_FILE, folder / SPECIAL_MAP_FILE):
        if config is not None and file.name == CONFIG_FILE:
            data = config
        elif file.is_file():
            data = _read_object(file)
        else:
            continue
        for role in ROLES:
            key = f"{role}_token"
            if roles.get(role) is None and key in data:
                roles[role] = _token_text(data[key], file, key)
        for key in EXTRA_KEYS:
            values = data.get(key) or []
            values = list(values.values()) if isinstance(values, Mapping) else values
            extra.extend(t for t in (_token_text(v, file, key) for v in values) if t is not None)
    return roles, extra


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
    return SpecialTokens(ids=ids, all_ids=union_ids(extra_ids, marked), prefix=prefix, suffix=suffix,
                         tokens={r: roles.get(r) for r in ROLES})


def decode_cleans_up(hf: HFTokenizer, config: Mapping[str, Any]) -> bool:
    """Whether transformers' decode of this folder removes spaces before punctuation: the config's
    ``clean_up_tokenization_spaces``, which transformers ignores for a BPE model unless forced."""
    if not config.get("clean_up_tokenization_spaces", False):
        return False
    forced = config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)
    return type(hf.model).__name__ != "BPE" or bool(forced)


def _template(hf: HFTokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The special ids the tokenizer's post-processor puts before and after one sequence."""
    for probe in PROBES:
        enc = hf.encode(probe, add_special_tokens=True)
        if not all(enc.special_tokens_mask):
            return template_of(enc.ids, enc.special_tokens_mask)
    return (), ()


def _id_of(hf: HFTokenizer, token: str, source: str | os.PathLike, what: str) -> int:
    found = hf.token_to_id(token)
    if found is None:
        raise ValueError(f"{source}: {what} {token!r} is not in the vocabulary of its {TOKENIZER_FILE}")
    return found


def _token_text(value: Any, file: Path, key: str) -> str | None:
    """A special token as written by transformers: a string, ``{"content": ...}`` (AddedToken) or null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"{file}: {key} must be a token string or {{\"content\": ...}}, got {value!r}")


def _read_object(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt tokenizer config {file}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"corrupt tokenizer config {file}: expected a JSON object, got {type(data).__name__}")
    return data


def write_hf_folder(tokenizer: ZooTokenizer, directory: str | os.PathLike) -> Path:
    """``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` for ``tokenizer`` in
    ``directory`` (each written atomically). The config names the generic fast class, so transformers uses
    ``tokenizer.json`` as it is, and ``split_special_tokens`` so special-token text in input stays text."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    named = {f"{role}_token": token for role, token in tokenizer.specials.tokens.items() if token is not None}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **named,
        "split_special_tokens": True,
        "clean_up_tokenization_spaces": tokenizer.clean_up_spaces,
    }
    atomic_write_bytes(directory / TOKENIZER_FILE, tokenizer.hf.to_str().encode("utf-8"))
    atomic_write_json(directory / CONFIG_FILE, config)
    atomic_write_json(directory / SPECIAL_MAP_FILE, named)
    return directory


def _hf_files(path: Path) -> list[Path]:
    return [path / name for name in (TOKENIZER_FILE, CONFIG_FILE, SPECIAL_MAP_FILE) if (path / name).is_file()]


TOKENIZER_FILES["hf"] = _hf_files


@register_tokenizer("hf")
def tokenizer_from_hf(texts: list[str], *, path: Annotated[str, HF_FOLDER]) -> ZooTokenizer:
    """A Hugging Face tokenizer folder with its own special tokens and ids (nothing is trained)."""
    del texts
    return load_hf_tokenizer(path)
