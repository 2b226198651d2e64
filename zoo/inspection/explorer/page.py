"""One self-contained HTML file: the template with its stylesheet, script and data inlined (no network,
works from file://). The template, CSS and JS ship as package data next to this module."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from zoo.atomic import atomic_file
from zoo.outputs import Output

PARTS = {"/*__STYLE__*/": "explorer.css", "/*__SCRIPT__*/": "explorer.js"}
DATA_SLOT = "__DATA__"
PAGE_MARK = '<script type="application/json" id="zoo-data">'  # explorer.html's data element: a page of ours


def _asset(name: str) -> str:
    return resources.files("zoo.inspection.explorer").joinpath(name).read_text(encoding="utf-8")


@cache
def _template() -> str:
    """explorer.html with the stylesheet and script inlined; one DATA_SLOT left for the data."""
    html = _asset("explorer.html")
    for slot, name in PARTS.items():
        html = html.replace(slot, _asset(name))
    if html.count(DATA_SLOT) != 1 or PAGE_MARK + DATA_SLOT not in html:
        raise RuntimeError(f"explorer.html must hold {DATA_SLOT} exactly once, in {PAGE_MARK}, found "
                           f"{html.count(DATA_SLOT)}.")
    return html


def to_json(value: Any) -> str:
    """JSON for the data element. Every `<` is written as \\u003c (JSON.parse reads it back), so nothing in
    the data can end the element (`</script`) or switch the HTML parser into a state where its own end tag no
    longer ends it (`<!--<script`, which left the page's script swallowed as data)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c")


def json_bytes(value: Any) -> int:
    """Bytes `value` takes in the page (UTF-8, escaped as embedded)."""
    return len(to_json(value).encode("utf-8"))


def chrome_bytes() -> int:
    """Bytes of the page without its data: template, stylesheet and script."""
    return len(_template().encode("utf-8")) - len(DATA_SLOT)


def render(data: dict[str, Any]) -> str:
    """The page as one string; the data sits in a JSON script element (see `to_json`)."""
    return _template().replace(DATA_SLOT, to_json(data))


def wrote_page(path: Path) -> bool:
    """Whether `path` is an explorer page zoo wrote (it holds the page's data element)."""
    try:
        return PAGE_MARK in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


PAGE_OUTPUT = Output("html", "an explorer page", folder=False, ours=wrote_page, example="explorer.html")


def write_page(data: dict[str, Any], path: str | Path) -> Path:
    """Write the page atomically (a reader never sees half a file); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(render(data).encode("utf-8"))
    return path
