"""Optional: text from a Hugging Face ``datasets`` dataset (only when that extra is installed).

This is the one source that may download; the built-in sources never do.
"""

from __future__ import annotations

import importlib

from zoo.data.sources.base import TextCorpus, register_source


def _datasets_module():
    try:
        return importlib.import_module("datasets")
    except ImportError:
        raise ValueError(
            "data=hf_text needs the optional 'datasets' package (pip install datasets); "
            "use data=text for local files"
        ) from None


@register_source("hf_text")
def load_hf_text(
    *,
    dataset: str,
    config: str | None = None,
    text_field: str = "text",
    train_split: str = "train",
    val_split: str = "validation",
) -> TextCorpus:
    """Rows of ``text_field`` from two splits of ``datasets.load_dataset(dataset, config)``."""
    datasets = _datasets_module()
    splits = {}
    for key, split in (("train_split", train_split), ("val_split", val_split)):
        try:
            rows = datasets.load_dataset(dataset, config, split=split)
        except Exception as e:  # datasets raises many types; name what was asked for
            raise ValueError(
                f"data.dataset={dataset!r} (config={config!r}, data.{key}={split!r}): {e}"
            ) from None
        if text_field not in rows.column_names:
            raise ValueError(f"data.text_field={text_field!r} not in {dataset} columns {rows.column_names}")
        splits[key] = [t for t in rows[text_field] if isinstance(t, str) and t.strip()]
        if not splits[key]:
            raise ValueError(f"data.dataset={dataset!r} split {split!r}: field {text_field!r} is empty")
    return TextCorpus(train=splits["train_split"], val=splits["val_split"])
