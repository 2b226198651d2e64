"""inspect_model.py's `out_dir=`: the files it writes there (trace.json and the PNG plots) and how zoo knows
its own (a PNG's Software text, trace.json's rows), so that a user's file of the same name is never replaced;
other files in the folder are left alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

from zoo.outputs import Output

SOFTWARE = "zoo.inspection"  # the PNG text chunk zoo's plots carry (plots._save)
WRITTEN = re.compile(r"trace\.json|(attention_.+|(local_)?mask_.+|positional|dot_vs_distance)\.png")
TRACE_KEYS = {"name", "layer", "stream", "shape", "module", "kind"}  # trace.Record.as_dict


def _png_is_ours(path: Path, earlier_zoo: bool) -> bool:
    """A plot zoo wrote: tagged SOFTWARE, or (`earlier_zoo`: the folder's trace.json is zoo's) matplotlib's
    own tag, which the plots carried before the tag was added."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            software = image.info.get("Software", "") if image.format == "PNG" else None
    except Exception:  # not an image at all: a user's file under a plot's name
        return False
    return software == SOFTWARE or (earlier_zoo and str(software).startswith("Matplotlib"))


def _trace_is_ours(path: Path) -> bool:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(rows, list) and all(isinstance(r, dict) and set(r) == TRACE_KEYS for r in rows)


def wrote_plots(folder: Path) -> bool:
    """Whether every file in `folder` under a name inspect_model.py writes is one it wrote."""
    trace = folder / "trace.json"
    earlier_zoo = trace.is_file() and _trace_is_ours(trace)
    return all(_trace_is_ours(f) if f.suffix == ".json" else _png_is_ours(f, earlier_zoo)
               for f in folder.iterdir() if WRITTEN.fullmatch(f.name))


PLOTS_OUTPUT = Output("out_dir", "a folder of zoo's inspection plots", folder=True, ours=wrote_plots,
                      replaces="its own trace.json and plots (other files stay)")
