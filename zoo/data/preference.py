"""Preference pairs from JSONL in trl's preference format, one row a line: `{"prompt", "chosen", "rejected"}`
(text), or `{"chosen", "rejected"}` with the prompt implicit (their common prefix, cut as trl's
`extract_prompt` cuts it). A row of no known format, a pair whose completions are equal, an empty completion
or a conversational row (messages: not read yet) is one ValueError naming file:line, before any work."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

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
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data.path={str(path)!r}: no such file")
    rows = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON ({e.msg})") from None
            rows.append(parse_row(value, where))
    if not rows:
        raise ValueError(f"{path}: no preference rows")
    return rows
