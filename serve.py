"""Serve a decoder over HTTP with OpenAI's API and continuous batching: `python serve.py ckpt=path` (a
training checkpoint or a zoo export folder) or `python serve.py hf=<folder>` (a Hugging Face model folder);
options host=127.0.0.1 port=8000 model_name= max_batch=64 max_queue=256 timeout=600 device=cpu log_level=info
api_key= (default $ZOO_API_KEY; a host other than loopback needs one, or insecure_no_key=true) max_body_mb=8
prepare_workers=2 prepare_timeout=10 prepare_memory_mb=2048.
Endpoints: /v1/models, /v1/completions, /v1/chat/completions (stream=true: server-sent events). Needs the
`serve` extra (fastapi, uvicorn). See docs/serving.md."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    from zoo.training.heap import import_checkpoint_opening, imports_frozen

    try:
        # the server's import heap frozen: every full collection while it serves skips those objects
        with imports_frozen():
            import_checkpoint_opening()
            import uvicorn  # noqa: F401  (main's server)

            from zoo.serving.cli import main
        sys.exit(main(sys.argv[1:]))
    except ValueError as e:  # bad options or checkpoints (CheckpointError is a ValueError)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except ModuleNotFoundError as e:
        if e.name not in ("fastapi", "uvicorn"):
            raise
        print(f"error: serve.py needs {e.name}: pip install 'zoo[serve]'", file=sys.stderr)
        sys.exit(2)
