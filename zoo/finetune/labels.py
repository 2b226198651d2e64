"""The label order of a run whose `init_from` head is reused (a *ForSequenceClassification or
*ForTokenClassification folder): the head's outputs are the folder's `id2label`, so the data's labels are
indexed in the folder's order. The data's own order (sorted names) would silently swap the classes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def generic_names(names: Sequence[str]) -> bool:
    """transformers' default id2label (LABEL_0 .. LABEL_{n-1}): names that carry no meaning."""
    return list(names) == [f"LABEL_{i}" for i in range(len(names))]


@dataclass
class LabelOrder:
    """The run's label names (index = head output) and where each data label id goes (data id -> run id)."""

    names: list[str]
    to_run: np.ndarray  # (len(data names),) int64
    note: str | None = None  # what the run should say about it


def order_labels(folder: Sequence[str], data: Sequence[str], where: str, head: str, kind: str = "labels"
                 ) -> LabelOrder:
    """The folder's id2label wins: the data's labels indexed in its order (the data may use a subset of them).
    Generic folder names (LABEL_i) take the data's sorted order in place when the count matches, as
    transformers' run_glue does. ValueError naming the data's labels the folder lacks and the way out."""
    folder, data = list(folder), list(data)
    way_out = (f"relabel the data with the folder's names, or train a fresh head from the data's {kind}: "
               f"model.head={head} on the command line replaces the folder's head")
    if generic_names(folder):
        if len(folder) != len(data):
            raise ValueError(f"{where}: the folder's head has {len(folder)} outputs with generic names "
                             f"(id2label LABEL_0..LABEL_{len(folder) - 1}) but the data has {len(data)} "
                             f"{kind} {data}; {way_out}")
        return LabelOrder(data, np.arange(len(data), dtype=np.int64),
                          f"the folder's label names are generic (LABEL_0..LABEL_{len(folder) - 1}): the "
                          f"data's {kind} {data} take their places in that order")
    missing = [name for name in data if name not in folder]
    if missing:
        raise ValueError(f"{where}: the data has {kind} {missing} that the folder's head does not know; its "
                         f"id2label is {folder}; {way_out}")
    order = in_order(folder, data)
    if folder != data:
        order.note = f"the data's {kind} are indexed in the folder's id2label order {folder}"
    return order


def in_order(names: Sequence[str], data: Sequence[str]) -> LabelOrder:
    """The data's labels (each one of `names`) indexed in the order of `names`."""
    index = {name: i for i, name in enumerate(names)}
    return LabelOrder(list(names), np.array([index[name] for name in data], dtype=np.int64))


def relabel(labels: np.ndarray, to_run: np.ndarray) -> np.ndarray:
    """`labels` (data ids; negative = ignored, e.g. -100 on a word's later sub-tokens) as run ids."""
    labels = np.asarray(labels)
    return np.where(labels >= 0, to_run[np.clip(labels, 0, None)], labels).astype(labels.dtype)


def reindex(datamodule, tokenizer, order: LabelOrder) -> None:
    """The datamodule's examples relabelled to `order` (its datasets rebuilt); its and the tokenizer's label
    names become `order.names`. Nothing moves when the names already are."""
    if order.names == list(datamodule.label_names):
        return
    datamodule.examples = {split: (ids, relabel(labels, order.to_run))
                           for split, (ids, labels) in datamodule.examples.items()}
    datamodule.label_names = tokenizer.label_names = order.names
    datamodule.setup("fit")  # the datasets again, from the relabelled examples
