"""`python -m zoo.training.consolidate ckpt=<sharded folder> out=<file.ckpt>`: one checkpoint file from the
shards every rank wrote (trainer=fsdp, trainer.sharded_checkpoint=true), for tools and machines that want a
single file; `zoo.load`, generate.py, evaluate.py and export.py (format=hf too) also read the folder as it
is. `out=` is a new file or one consolidate wrote before (zoo.outputs); anything else, a folder or a place
that cannot be written is refused naming it before a shard is read. Bad input is one `error:` line and exit
code 1."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from zoo.apps import PATH, cli_key, parse_key_values
from zoo.checkpoint import consolidate

USAGE = "python -m zoo.training.consolidate ckpt=<sharded checkpoint folder> out=<file.ckpt>"


@dataclass
class ConsolidateArgs:
    """Everything `python -m zoo.training.consolidate key=value ...` accepts; both keys are required."""

    ckpt: str | None = cli_key(rule=PATH)  # the sharded checkpoint folder
    out: str | None = cli_key(rule=PATH)  # the file to write


def parse(argv: Sequence[str]) -> ConsolidateArgs:
    """`key=value` arguments -> ConsolidateArgs (zoo.apps.parse_key_values); ValueError naming a bad
    argument, or the usage when ckpt= or out= is missing."""
    args = parse_key_values(argv, ConsolidateArgs)
    if args.ckpt is None or args.out is None:
        raise ValueError(f"expected ckpt=... out=...; usage: {USAGE}")
    return args


def main(argv: Sequence[str]) -> int:
    """Consolidate as `argv` (key=value) says; 0 when written, 1 after one `error:` line on bad input."""
    try:
        args = parse(argv)
        written = consolidate(args.ckpt, args.out)
    except (ValueError, OSError) as e:  # CheckpointError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {written} (weights and zoo record of {args.ckpt}; no optimizer state)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
