"""An interactive, self-contained HTML page for one model and one input (issue 16): tokens, the shape trace,
attention per layer and head, masks, the positional pattern, the next-token distribution with live
temperature / top-k / top-p, greedy vs beam search as a tree, parameter and FLOP tables.

    from zoo.inspection.explorer import explore
    explore(model, tokenizer.encode("the cat sat"), "explorer.html", tokenizer=tokenizer)

`inspect_model.py ... html=explorer.html` writes the same page. See docs/inspection.md."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.inspection.explorer.budget import PageBudgetError
from zoo.inspection.explorer.collect import explorer_data
from zoo.inspection.explorer.page import render, write_page

__all__ = ["PageBudgetError", "explore", "explorer_data", "render", "vocab_labeller", "write_page"]


def _visible(text: str) -> str:
    return text.replace(" ", "·").replace("\n", "\\n").replace("\t", "\\t")


def vocab_labeller(tokenizer: Any = None, names: dict[int, str] | None = None) -> Callable[[int], str]:
    """id -> readable label: the token decoded on its own when that is whole text (so byte-level BPE shows
    Korean, not bytes), else the tokenizer's token string; without a tokenizer `names` or "#id"."""
    hf = getattr(tokenizer, "hf", None)
    special = set(getattr(tokenizer, "special_ids", ()) or ())

    def label(i: int) -> str:
        if names is not None and i in names:
            return names[i]
        if hf is None:
            return f"#{i}"
        token = hf.id_to_token(i)
        if i in special or token is None:
            return token or f"#{i}"
        text = tokenizer.decode([i], skip_special_tokens=False)
        return _visible(text) if text and "\ufffd" not in text else token

    return label


def explore(
    model,
    input_ids: list[int],
    path: str | Path,
    *,
    tokenizer: Any = None,
    tokens: list[str] | None = None,
    decoder_ids: list[int] | None = None,
    **options: Any,
) -> Path:
    """Write the explorer page for `input_ids` to `path`. Labels come from `tokenizer` (or `tokens`, else
    the ids). An encoder-decoder's decoder input defaults to [start_id] + input_ids. `options` go to
    `explorer_data` (layers, num_beams, max_new_tokens, eos_ids, n_positions, max_mb, title, source); the file
    is at most `max_mb` MB (PageBudgetError, before writing, when even its fixed parts do not fit)."""
    label = vocab_labeller(tokenizer)
    if model.is_encoder_decoder and decoder_ids is None:
        decoder_ids = [model.config.start_id] + list(input_ids)
    if tokenizer is not None and "eos_ids" not in options:
        options["eos_ids"] = [tokenizer.eos_id]
    data = explorer_data(model, list(input_ids), tokens=tokens or [label(i) for i in input_ids],
                         vocab_label=label, decoder_ids=decoder_ids, **options)
    return write_page(data, path)
