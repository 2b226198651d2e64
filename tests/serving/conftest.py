"""A tiny decoder and its character tokenizer served on 127.0.0.1 (uvicorn on a background thread), and the
reference every test compares with: `model.generate` on the same prompt ids."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

import zoo
from zoo.data import TOKENIZERS

pytest.importorskip("fastapi", reason="the serve extra (fastapi, uvicorn) is in dev; pip install -e .[dev]")

TEXTS = ["the cat sat on the mat", "a dog ran far away", "hello world", "why? because."]
NAME = "tiny-zoo"


def tiny(max_seq_len: int = 64):
    """A 2-layer RoPE decoder over a character vocabulary, eval mode."""
    tok = TOKENIZERS["char"](TEXTS)
    torch.manual_seed(0)
    model = zoo.build(dict(arch="decoder", vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=4,
                           positional="rope", max_seq_len=max_seq_len, dropout=0.0)).eval()
    return model, tok


@contextmanager
def serving(model, tok, **options) -> Iterator[tuple[str, object]]:
    """(base URL ending in /v1, Served) of a server running until the block ends; `options` are
    served_model's and create_app's (api_key, max_body_mb)."""
    from zoo.serving.cli import served_model, start_server

    start = options.pop("start", True)
    app_options = {k: options.pop(k) for k in ("api_key", "max_body_mb") if k in options}
    options.setdefault("prepare_workers", 1)  # one preparing process is enough here (each costs a start)
    served = served_model(model, tok, NAME, **options) if start else _unstarted(model, tok, **options)
    server, thread, port = start_server(served, **app_options)
    try:
        yield f"http://127.0.0.1:{port}/v1", served
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        served.close()


def _unstarted(model, tok, **options):
    """A Served whose engine thread is not running: queued requests stay queued until `engine.start()`."""
    from zoo.generation.continuous.engine import Engine
    from zoo.serving.app import Served

    timeout = options.pop("timeout", 600.0)
    workers = {"processes": options.pop("prepare_workers")}
    engine = Engine(model, pad_id=model.config.pad_id, **options)
    return Served(model, tok, NAME, model.config.max_seq_len, engine, timeout, prepare_options=workers)


@pytest.fixture(scope="module")
def server():
    """(base URL, Served, model, tokenizer) shared by a test module."""
    model, tok = tiny()
    with serving(model, tok) as (url, served):
        yield url, served, model, tok


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai", reason="the openai client is in the dev extra")
    return openai.OpenAI(base_url=server[0], api_key="unused", max_retries=0, timeout=60)


def reference(model, tok, ids: list[int], max_tokens: int, **sampling) -> str:
    """What model.generate continues `ids` with, as text (EOS and after it dropped)."""
    out = model.generate([ids], max_new_tokens=max_tokens, eos_token_id=tok.eos_id, **sampling)[0, len(ids):]
    new = out.tolist()
    if tok.eos_id in new:
        new = new[: new.index(tok.eos_id)]
    return tok.decode(new)
