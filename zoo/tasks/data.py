"""A task's data: the task gives the data layer (zoo.data.build.open_data) what it decides, the kind of
examples it reads, the special tokens its data needs and its datamodule; the data layer knows no task."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from zoo.data.build import CorpusKindError, open_data
from zoo.data.datamodules import ZooDataModule
from zoo.tasks.base import TASKS, Task, all_tasks
from zoo.tokenizers import ZooTokenizer


def build_data(
    data_cfg: Mapping[str, Any],
    tokenizer_cfg: Mapping[str, Any],
    *,
    task: Task | str,
    max_seq_len: int,
    batch_size: int,
    cache_dir: str | os.PathLike | None = None,
    seed: int = 0,
    tokenizer: ZooTokenizer | None = None,
    whole: bool = False,
) -> tuple[ZooTokenizer, ZooDataModule]:
    """``open_data`` for ``task`` (a Task or its name): ``(tokenizer, datamodule)``, the data read, tokenized
    and cached (``tokenizer``: the one ``tokenizer_cfg`` reads, already built; ``whole``: every example in
    each split, evaluate.py split=all). Bad input raises ValueError/FileNotFoundError before training."""
    if isinstance(task, str):
        if task not in TASKS:
            raise ValueError(f"task={task!r} is unknown; known: {TASKS.names()}")
        task = TASKS.get(task)
    try:
        return open_data(data_cfg, tokenizer_cfg, corpus_kind=task.corpus_kind,
                         check_tokenizer=task.check_tokenizer, datamodule=task.datamodule,
                         max_seq_len=max_seq_len, batch_size=batch_size, cache_dir=cache_dir, seed=seed,
                         tokenizer=tokenizer, whole=whole)
    except CorpusKindError as e:
        fits = [t.name for t in all_tasks() if t.corpus_kind == e.kind]
        raise ValueError(f"{e}, which suit task {fits}, not task={task.name!r}") from None
