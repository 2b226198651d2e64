"""Generate from a checkpoint: `python generate.py ckpt=path prompt="Once upon"` (decoders),
`python generate.py ckpt=path src="a sentence"` (encoder-decoders), `python generate.py ckpt=path chat=true
prompt="Hi"` (the tokenizer's chat template; system=, messages_file=); every decoding option is a key=value
override (max_new_tokens, do_sample, temperature, top_k, top_p, num_beams, ...). See docs/decoding.md."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):  # before any import: the help needs none
        print(__doc__)
        sys.exit(0)
    from zoo.training.heap import import_checkpoint_opening, imports_frozen

    with imports_frozen():
        import_checkpoint_opening()

        from zoo.generate_cli import main
    try:
        sys.exit(main(sys.argv[1:]))
    except ValueError as e:  # bad overrides, inputs or checkpoints (CheckpointError is a ValueError)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
