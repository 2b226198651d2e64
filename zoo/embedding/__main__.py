"""`python -m zoo.embedding folder=DIR input=texts.txt output=emb.npy`: see zoo.embedding.cli and
docs/pretrained.md#sentence-embeddings. Bad arguments are one `error:` line and exit status 2."""

import sys

from zoo.embedding import cli

if any(a in ("-h", "--help") for a in sys.argv[1:]):
    print(cli.__doc__)
    sys.exit(0)
try:
    sys.exit(cli.main(sys.argv[1:]))
except (ValueError, TypeError, FileNotFoundError) as e:  # bad arguments, inputs or folders
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
