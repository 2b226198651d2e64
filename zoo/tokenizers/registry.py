"""The tokenizer kinds by name: ``TOKENIZERS.get(name)(texts, **cfg) -> ZooTokenizer``, where ``texts`` is the
training split. Each builder's keyword parameters are the ``tokenizer.*`` keys and their hints the values
allowed. Each kind registers itself in its own module (trained.py: bpe, char; saved.py: file; hf.py: hf);
importing ``zoo.tokenizers`` imports them all."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zoo.options import TEXT, Options, check_entry
from zoo.registry import Registry
from zoo.tokenizers.tokenizer import ZooTokenizer

TokenizerBuilder = Callable[..., ZooTokenizer]
TOKENIZERS: Registry[TokenizerBuilder] = Registry("tokenizer", key="tokenizer.name")
# tokenizer name -> the files its `path` names, for a kind read from files (hashed into the data cache key)
TOKENIZER_FILES: dict[str, Callable[[Path], list[Path]]] = {}


def register_tokenizer(name: str, files: Callable[[Path], list[Path]] | None = None
                       ) -> Callable[[TokenizerBuilder], TokenizerBuilder]:
    """Decorator: `@register_tokenizer("bpe")` makes ``builder(texts, **options)`` available as
    `tokenizer=bpe`; its keyword parameters are the `tokenizer.*` keys, their hints the allowed values.
    ``files``: for a kind read from files, the files its ``path`` names (their bytes key the data cache)."""
    if files is not None:
        TOKENIZER_FILES[name] = files
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


def trains(cfg: Mapping[str, Any]) -> bool:
    """Whether the tokenizer learns from text: its builder takes `train_bytes` (tokenizer=file does not)."""
    return "train_bytes" in tokenizer_options(cfg["name"]).rules


def tokenizer_files(cfg: Mapping[str, Any]) -> list[Path]:
    """The files a tokenizer config reads (hashed into the data cache key); [] for a trained tokenizer."""
    files_of = TOKENIZER_FILES.get(cfg["name"])
    return files_of(Path(cfg["path"])) if files_of else []
