"""`python export.py ckpt=PATH dir=OUT [format=zoo|hf] [model_type=...]`: `zoo.export` from the command line.
Every argument is key=value (zoo.apps.parse_key_values); keys besides ckpt, dir and format are the formats'
options (hf: model_type), each passed on when given. Bad input is one `error:` line and exit code 1."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

from zoo.apps import PATH, cli_key, parse_key_values
from zoo.export import export
from zoo.export.registry import FORMATS

USAGE = ("python export.py ckpt=<checkpoint or export> dir=<folder> [format=zoo|hf|gguf] "
         "[model_type=<family>] [dtype=f32|f16|q8_0|q4_0 (gguf)]")
# every registered format's keyword options (text); export() refuses one the chosen format does not take
FORMAT_OPTIONS = sorted({option for name in FORMATS.names() for option in FORMATS.get(name).options})

ExportArgs = dataclasses.make_dataclass(
    "ExportArgs",
    [("ckpt", str | None, cli_key(rule=PATH)),  # a training checkpoint (.ckpt, or a sharded folder) or export
     ("dir", str | None, cli_key(rule=PATH)),  # the export folder to write
     ("format", str, cli_key("zoo")),  # a name in zoo.export.registry.FORMATS
     *[(option, str | None, cli_key()) for option in FORMAT_OPTIONS]],
    namespace={"__module__": __name__, "__doc__": "Everything `python export.py key=value ...` accepts."},
)


def parse(argv: Sequence[str]) -> ExportArgs:
    """`key=value` arguments -> ExportArgs (zoo.apps.parse_key_values); ValueError naming a bad argument or
    a missing ckpt / dir."""
    args = parse_key_values(argv, ExportArgs)
    missing = [key for key in ("ckpt", "dir") if getattr(args, key) is None]
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
        options = {key: getattr(args, key) for key in FORMAT_OPTIONS if getattr(args, key) is not None}
        written = export(args.ckpt, args.dir, args.format, **options)
    except (ValueError, OSError) as e:  # CheckpointError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"exported {args.ckpt} to {written} (format {args.format})")
    return 0
