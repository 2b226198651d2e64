"""Tokenizers (io floor): the :class:`ZooTokenizer` object, its special tokens, and the kinds by name.

``build_tokenizer({"name": "bpe", "vocab_size": 4096}, texts)`` trains or reads one (kinds: bpe, char, file,
hf; each registers itself in its own module, all imported here); ``load_tokenizer(folder)`` reads back what
``tok.save(folder)`` wrote; ``load_hf_tokenizer(folder)`` reads a Hugging Face tokenizer folder;
``model_overrides(tok)`` gives the model-config fields a tokenizer decides (vocab size, special ids)."""

from zoo.tokenizers import hf, saved, trained  # noqa: F401  (each registers its kind)
from zoo.tokenizers.hf import load_hf_tokenizer
from zoo.tokenizers.registry import (
    TOKENIZERS,
    build_tokenizer,
    register_tokenizer,
    tokenizer_files,
    tokenizer_options,
    trains,
    validate_tokenizer_cfg,
)
from zoo.tokenizers.specials import SpecialTokens
from zoo.tokenizers.tokenizer import SPECIAL_TOKENS, ZooTokenizer, load_tokenizer, model_overrides

__all__ = [
    "SPECIAL_TOKENS",
    "TOKENIZERS",
    "SpecialTokens",
    "ZooTokenizer",
    "build_tokenizer",
    "load_hf_tokenizer",
    "load_tokenizer",
    "model_overrides",
    "register_tokenizer",
    "tokenizer_files",
    "tokenizer_options",
    "trains",
    "validate_tokenizer_cfg",
]
