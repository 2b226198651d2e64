"""Tables in docs/*.md that a test module renders: the text between two markers is replaced by the rendering,
and a test checks the doc holds exactly what would be rendered (so the table cannot drift from the tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def cell(text: str) -> str:
    """A markdown table cell: a literal `|` escaped."""
    return text.replace("|", "\\|")


def replace_between(text: str, start: str, end: str, rendered: str) -> str:
    """`text` with everything from `start` to `end` (markers included) replaced by `rendered`."""
    head, rest = text.split(start, 1)
    return head + rendered + rest.split(end, 1)[1]


def rewrite(doc: Path, start: str, end: str, render: Callable[[], str]) -> None:
    """Rewrite the table in `doc` in place (`python -m tests.<module>`)."""
    doc.write_text(replace_between(doc.read_text(encoding="utf-8"), start, end, render()), encoding="utf-8")
