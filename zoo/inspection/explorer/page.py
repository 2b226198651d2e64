"""One self-contained HTML file: the template with its stylesheet, script and data inlined (no network,
works from file://). The template, CSS and JS ship as package data next to this module."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from zoo.atomic import atomic_file

PARTS = {"/*__STYLE__*/": "explorer.css", "/*__SCRIPT__*/": "explorer.js"}
DATA_SLOT = "__DATA__"


def _asset(name: str) -> str:
    return resources.files("zoo.inspection.explorer").joinpath(name).read_text(encoding="utf-8")


def render(data: dict[str, Any]) -> str:
    """The page as one string; the data sits in a JSON script element ('</' escaped so it cannot end it)."""
    html = _asset("explorer.html")
    for slot, name in PARTS.items():
        html = html.replace(slot, _asset(name))
    payload = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    return html.replace(DATA_SLOT, payload)


def write_page(data: dict[str, Any], path: str | Path) -> Path:
    """Write the page atomically (a reader never sees half a file); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(render(data).encode("utf-8"))
    return path
