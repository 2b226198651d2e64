"""`python -m zoo.training.consolidate ckpt=<sharded folder> out=<file.ckpt>`: one checkpoint file from the
shards every rank wrote (trainer=fsdp, trainer.sharded_checkpoint=true), for tools and machines that want a
single file; `zoo.load`, generate.py, evaluate.py and export.py (format=hf too) also read the folder as it
is. `out=` is a new file or one consolidate wrote before (zoo.outputs); anything else, a folder or a place
that cannot be written is refused naming it before a shard is read. Bad input is one `error:` line and exit
code 1."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zoo.checkpoint import consolidate

USAGE = "python -m zoo.training.consolidate ckpt=<sharded checkpoint folder> out=<file.ckpt>"


def main(argv: Sequence[str]) -> int:
    """Consolidate as `argv` (key=value) says; 0 when written, 1 after one `error:` line on bad input."""
    args = dict(arg.partition("=")[::2] for arg in argv)
    try:
        if set(args) != {"ckpt", "out"} or not all(args.values()):
            raise ValueError(f"expected ckpt=... out=...; usage: {USAGE}")
        written = consolidate(args["ckpt"], args["out"])
    except (ValueError, OSError) as e:  # CheckpointError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {written} (weights and zoo record of {args['ckpt']}; no optimizer state)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
