"""Data and tokenizers for zoo: built-in corpora (no download), user files, BPE/char tokenizers,
a content-hash cache and one Lightning DataModule per task.

A task's data is read through ``zoo.tasks.build_data`` (the task says which kind of examples it reads and
builds its datamodule); below it, ``zoo.data.build.open_data`` takes those as plain arguments. Example::

    from zoo.tasks import build_data
    tok, dm = build_data({"name": "stdlib_text", "max_bytes": 2_000_000}, {"name": "bpe", "vocab_size": 4096},
                         task="lm", max_seq_len=256, batch_size=32, cache_dir="cache", seed=0)
    model_cfg.update(model_overrides(tok))   # vocab_size, pad/bos/eos ids (+ num_labels)
    trainer.fit(model, datamodule=dm); tok.save(run_dir / "tokenizer")
"""

from zoo.data.datamodules import (
    ClassificationDataModule,
    LMDataModule,
    MLMDataModule,
    Seq2SeqDataModule,
    ZooDataModule,
)
from zoo.data.sources import SOURCES
from zoo.tokenizers import (  # re-exported: tokenizers are a floor below data (zoo/tokenizers)
    SPECIAL_TOKENS,
    TOKENIZERS,
    ZooTokenizer,
    load_hf_tokenizer,
    load_tokenizer,
    model_overrides,
)

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
