"""`python export.py ckpt=PATH dir=OUT [format=zoo|hf] [model_type=...]`: `zoo.export` from the command line.
Every argument is key=value; keys besides ckpt, dir and format are the format's options (hf: model_type).
Bad input is one `error:` line and exit code 1."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zoo.export import export

USAGE = "python export.py ckpt=<checkpoint or export> dir=<folder> [format=zoo|hf] [model_type=<family>]"


def parse(argv: Sequence[str]) -> dict[str, str]:
    """`key=value` arguments as a dict; ValueError naming a bare argument or a missing ckpt / dir."""
    args = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ValueError(f"argument {arg!r} is not key=value; usage: {USAGE}")
        args[key] = value
    missing = [key for key in ("ckpt", "dir") if not args.get(key)]
    if missing:
        raise ValueError(f"{missing[0]} is required; usage: {USAGE}")
    return args


def main(argv: Sequence[str]) -> int:
    """Export as `argv` says; 0 when done, 1 (after one `error:` line on stderr) on bad input."""
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    try:
        args = parse(argv)
        ckpt, out, format = args.pop("ckpt"), args.pop("dir"), args.pop("format", "zoo")
        written = export(ckpt, out, format, **args)
    except (ValueError, OSError) as e:  # CheckpointError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"exported {ckpt} to {written} (format {format})")
    return 0
