"""Preference pairs from JSONL in trl's preference format, one row a line: `{"prompt", "chosen", "rejected"}`
(text), or `{"chosen", "rejected"}` with the prompt implicit (their common prefix, cut as trl's
`extract_prompt` cuts it). A row of no known format, a pair whose completions are equal, an empty completion
or a conversational row (messages: not read yet) is one ValueError naming file:line, before any work."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from zoo.data.readers import jsonl_values

FORMATS = ("prompt/chosen/rejected", "chosen/rejected (implicit prompt)")


@dataclass(frozen=True)
class PreferenceRow:
    """One pair: the prompt and the two completions that follow it, the first preferred."""

    prompt: str
    chosen: str
    rejected: str


def implicit_prompt(chosen: str, rejected: str) -> tuple[str, str, str]:
    """(prompt, chosen, rejected): the common prefix is the prompt; a space just before the first difference
    goes with the completions (trl's extract_prompt)."""
    idx = 0
    for idx in range(min(len(chosen), len(rejected))):  # noqa: B007  (the index the loop stops at is used)
        if chosen[idx] != rejected[idx]:
            if chosen[idx - 1] == " ":
                idx -= 1
            break
    return chosen[:idx], chosen[idx:], rejected[idx:]


def parse_row(row: object, where: str) -> PreferenceRow:
    """One JSON value as a pair, or ValueError starting with `where` (file:line)."""
    if not isinstance(row, dict) or not {"chosen", "rejected"} <= set(row):
        fields = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise ValueError(f"{where}: a preference row needs the fields {' or '.join(FORMATS)}; got {fields}")
    unknown = set(row) - {"prompt", "chosen", "rejected"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; a preference row has "
                         f"{' or '.join(FORMATS)}")
    if any(isinstance(v, list) for v in row.values()):
        raise ValueError(f"{where}: conversational rows (lists of messages) are not read yet; give "
                         "prompt/chosen/rejected as text")
    bad = [k for k, v in row.items() if not isinstance(v, str)]
    if bad:
        raise ValueError(f"{where}: field {bad[0]!r} must be text, got {type(row[bad[0]]).__name__}")
    if "prompt" in row:
        prompt, chosen, rejected = row["prompt"], row["chosen"], row["rejected"]
    else:
        prompt, chosen, rejected = implicit_prompt(row["chosen"], row["rejected"])
    if chosen == rejected:
        raise ValueError(f"{where}: chosen and rejected are the same text {chosen!r}: the pair prefers "
                         "nothing")
    for name, text in (("chosen", chosen), ("rejected", rejected)):
        if not text:
            raise ValueError(f"{where}: the {name} completion is empty"
                             + ("" if "prompt" in row else " once the common prefix (the prompt) is cut"))
    return PreferenceRow(prompt, chosen, rejected)


def read_preference_jsonl(path: str | Path) -> list[PreferenceRow]:
    """Every pair of a JSONL file (blank lines skipped); the first bad line raises naming path:line."""
    rows = [parse_row(value, where) for where, value in jsonl_values(path)]
    if not rows:
        raise ValueError(f"{path}: no preference rows")
    return rows


@dataclass(frozen=True)
class EncodedPair:
    """Token ids of one pair: the prompt, and each completion (with its eos) that follows it."""

    prompt: list[int]
    chosen: list[int]
    rejected: list[int]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def encode_pair(row: PreferenceRow, encode: Callable[[str], list[int]], eos_id: int) -> EncodedPair:
    """Ids of `row`: prompt+completion are tokenised whole (tokens may merge across the boundary), and the
    completion starts where they leave the tokenised prompt (trl's rule)."""
    prompt = encode(row.prompt)
    chosen = encode(row.prompt + row.chosen) + [eos_id]
    rejected = encode(row.prompt + row.rejected) + [eos_id]
    n = min(common_prefix_length(prompt, chosen), common_prefix_length(prompt, rejected))
    return EncodedPair(prompt[:n], chosen[n:], rejected[n:])


def collate_pairs(pairs: Sequence[EncodedPair], pad_id: int) -> dict[str, torch.Tensor]:
    """input_ids, attention_mask, completion_mask (2B, T): the B prompt+chosen rows, then the B
    prompt+rejected rows, right-padded to the longest."""
    rows = [p.prompt + p.chosen for p in pairs] + [p.prompt + p.rejected for p in pairs]
    marks = [[0] * len(p.prompt) + [1] * len(p.chosen) for p in pairs] + \
        [[0] * len(p.prompt) + [1] * len(p.rejected) for p in pairs]
    length = max(len(r) for r in rows)
    out = {"input_ids": torch.full((len(rows), length), pad_id, dtype=torch.long),
           "attention_mask": torch.zeros(len(rows), length, dtype=torch.long),
           "completion_mask": torch.zeros(len(rows), length, dtype=torch.long)}
    for i, (ids, mark) in enumerate(zip(rows, marks, strict=True)):
        out["input_ids"][i, :len(ids)] = torch.tensor(ids)
        out["attention_mask"][i, :len(ids)] = 1
        out["completion_mask"][i, :len(ids)] = torch.tensor(mark)
    return out
