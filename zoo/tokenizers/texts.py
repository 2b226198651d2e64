"""A tokenizer as plain text, {file name: text} (what a training checkpoint stores: weights_only-loadable),
back, and where two such tokenizers differ in what text becomes which id (a resume refuses a changed
tokenizer)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from zoo.tokenizers.tokenizer import LABELS_FILE, TOKENIZER_FILE, ZooTokenizer, load_tokenizer


def tokenizer_texts(tokenizer: ZooTokenizer) -> dict[str, str]:
    """The files `ZooTokenizer.save` writes, as {file name: text}."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(tmp)
        return {p.name: p.read_text(encoding="utf-8") for p in sorted(Path(tmp).iterdir()) if p.is_file()}


def tokenizer_from_texts(texts: Mapping[str, str]) -> ZooTokenizer:
    """The ZooTokenizer that `tokenizer_texts` wrote out."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in texts.items():
            (Path(tmp) / Path(name).name).write_text(text, encoding="utf-8")
        return load_tokenizer(tmp)


def tokenizer_differences(saved: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """Where two `tokenizer_texts` dicts differ in what text becomes which id: vocabulary, BPE merges,
    special tokens, the text pipeline, classification labels. Empty when they are the same tokenizer."""
    if TOKENIZER_FILE not in saved:
        return [f"files: the checkpoint holds no {TOKENIZER_FILE} to compare with"]
    old, new = json.loads(saved[TOKENIZER_FILE]), json.loads(current[TOKENIZER_FILE])
    diffs = _vocabulary_difference(saved[TOKENIZER_FILE], current[TOKENIZER_FILE])
    old_merges, new_merges = (_merges(t) for t in (old, new))
    if old_merges != new_merges:
        k = _first_difference(old_merges, new_merges)
        first = [m[k] if k < len(m) else None for m in (old_merges, new_merges)]
        diffs.append(f"merges: the BPE merge rules differ from #{k} on "
                     f"(checkpoint {first[0]!r}, this run {first[1]!r})")
    specials = [[t.get("content") for t in j.get("added_tokens") or []] for j in (old, new)]
    if specials[0] != specials[1]:
        diffs.append(f"special tokens: checkpoint {specials[0]}, this run {specials[1]}")
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        if old.get(part) != new.get(part):
            diffs.append(f"{part}: checkpoint {old.get(part)}, this run {new.get(part)}")
    labels = [json.loads(files.get(LABELS_FILE, "null")) for files in (saved, current)]
    if labels[0] != labels[1]:
        diffs.append(f"labels: checkpoint {labels[0]}, this run {labels[1]}")
    return diffs


def _vocabulary_difference(old_json: str, new_json: str) -> list[str]:
    """One line naming how many ids changed token and the first of them ([] when none did)."""
    old, new = ({i: t for t, i in HFTokenizer.from_str(j).get_vocab(with_added_tokens=True).items()}
                for j in (old_json, new_json))
    changed = sorted(i for i in old.keys() | new.keys() if old.get(i) != new.get(i))
    if not changed:
        return []
    i = changed[0]
    return [f"vocabulary: {len(changed)} of {max(len(old), len(new))} ids stand for other tokens, e.g. id "
            f"{i} is {old.get(i)!r} in the checkpoint, {new.get(i)!r} in this run"]


def _first_difference(old: list[str], new: list[str]) -> int:
    """Index of the first entry where two lists differ (the shorter length when one extends the other)."""
    return next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
                min(len(old), len(new)))


def _merges(tokenizer_json: Mapping[str, Any]) -> list[str]:
    """BPE merges as "a b" strings (tokenizers writes them as pairs or, in older files, as strings)."""
    return [m if isinstance(m, str) else " ".join(m)
            for m in tokenizer_json.get("model", {}).get("merges") or []]
