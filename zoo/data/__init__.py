"""Data and tokenizers for zoo: built-in corpora (no download), user files, BPE/char tokenizers,
a content-hash cache and one Lightning DataModule per task.

A task's data is read through ``zoo.tasks.build_data`` (the task says which kind of examples it reads and
builds its datamodule); below it, ``zoo.data.build.open_data`` takes those as plain arguments. Example::

    from zoo.tasks import build_data
    tok, dm = build_data({"name": "stdlib_text", "max_bytes": 2_000_000}, {"name": "bpe", "vocab_size": 4096},
                         task="lm", max_seq_len=256, batch_size=32, cache_dir="cache", seed=0)
    model_cfg.update(model_overrides(tok))   # vocab_size, pad/bos/eos ids
    trainer.fit(model, datamodule=dm); tok.save(run_dir / "tokenizer")
"""

from typing import Any

from zoo.data.datamodules import (
    ClassificationDataModule,
    LMDataModule,
    MLMDataModule,
    Seq2SeqDataModule,
    ZooDataModule,
)
from zoo.data.sources import SOURCES

# re-exported from the floor below (zoo/tokenizers) on first use (PEP 562): a package's __init__ imports only
# its own modules when imported (tests/test_floors.py)
_TOKENIZER_NAMES = ("SPECIAL_TOKENS", "TOKENIZERS", "ZooTokenizer", "load_hf_tokenizer", "load_tokenizer",
                    "model_overrides")

__all__ = [
    "SOURCES",
    "SPECIAL_TOKENS",
    "TOKENIZERS",
    "ClassificationDataModule",
    "LMDataModule",
    "MLMDataModule",
    "Seq2SeqDataModule",
    "ZooDataModule",
    "ZooTokenizer",
    "load_hf_tokenizer",
    "load_tokenizer",
    "model_overrides",
]


def __getattr__(name: str) -> Any:
    if name in _TOKENIZER_NAMES:
        import zoo.tokenizers

        value = globals()[name] = getattr(zoo.tokenizers, name)
        return value
    raise AttributeError(f"module 'zoo.data' has no attribute {name!r}")
