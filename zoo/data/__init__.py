"""Data and tokenizers for zoo: built-in corpora (no download), user files, BPE/char tokenizers,
a content-hash cache and one Lightning DataModule per task.

Entry point::

    build_data(data_cfg, tokenizer_cfg, *, task, max_seq_len, batch_size, cache_dir=None, seed=0)
        -> (ZooTokenizer, ZooDataModule)

``task`` is a ``zoo.tasks`` task or its name: ``lm``, ``mlm`` (text data), ``seq2seq`` (pair data) or
``classification`` (labelled data); the task builds the datamodule. ``data_cfg``/``tokenizer_cfg`` are mappings or OmegaConf configs shaped like
``conf/data/*.yaml`` and ``conf/tokenizer/*.yaml``. Example::

    tok, dm = build_data({"name": "stdlib_text", "max_bytes": 2_000_000}, {"name": "bpe", "vocab_size": 4096},
                         task="lm", max_seq_len=256, batch_size=32, cache_dir="cache", seed=0)
    model_cfg.update(model_overrides(tok))   # vocab_size, pad/bos/eos ids (+ num_labels)
    trainer.fit(model, datamodule=dm); tok.save(run_dir / "tokenizer")
"""

from zoo.data.build import build_data
from zoo.data.datamodules import (
    ClassificationDataModule,
    LMDataModule,
    MLMDataModule,
    Seq2SeqDataModule,
    ZooDataModule,
)
from zoo.data.sources import SOURCES
from zoo.data.sources.translation import exact_match
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
    "build_data",
    "exact_match",
    "load_hf_tokenizer",
    "load_tokenizer",
    "model_overrides",
]
