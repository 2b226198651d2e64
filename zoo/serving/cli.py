"""`python serve.py ckpt=... | hf=<folder> [host= port= ...]`: key=value options checked against a schema
(unknown keys fail with a close match), the model opened once, the engine started, uvicorn run.
`start_server` runs the same application on a background thread (tests, the load test)."""

from __future__ import annotations

import ipaddress
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zoo.apps import PATH, check_device, cli_key, parse_key_values
from zoo.generation.continuous.engine import Engine
from zoo.quantization.options import QuantizeOptions
from zoo.serving.app import Served, create_app
from zoo.serving.guard import DEFAULT_MAX_BODY_MB


@dataclass
class ServeConfig(QuantizeOptions):
    """Everything `python serve.py key=value ...` accepts (the `quantize*` keys shared with generate.py)."""

    ckpt: str | None = cli_key(rule=PATH)  # a training checkpoint (.ckpt) or a zoo export folder
    hf: str | None = cli_key(rule=PATH)  # a Hugging Face model folder (config.json, weights, tokenizer.json)
    host: str = "127.0.0.1"
    port: int = 8000
    model_name: str | None = None  # the id clients send as "model"; default: the checkpoint / folder name
    max_batch: int = 64  # rows decoded together (requests x n)
    max_queue: int = 256  # sequences waiting for a row; more get 429
    timeout: float = 600.0  # seconds a request may take, queued and running
    device: str = "cpu"
    log_level: str = "info"  # uvicorn's: critical, error, warning, info, debug, trace
    api_key: str | None = None  # clients send `Authorization: Bearer <key>`; default: $ZOO_API_KEY, else none
    insecure_no_key: bool = False  # serve a non-loopback host without an API key (refused otherwise)
    max_body_mb: float = DEFAULT_MAX_BODY_MB  # larger request bodies get 413
    prepare_workers: int = 2  # processes that parse, render and tokenize requests off the event loop
    prepare_timeout: float = 10.0  # seconds one request may take to prepare; past it 400, its process ended
    prepare_memory_mb: int = 2048  # data memory of each preparing process; past it, 400


def parse_overrides(argv: Sequence[str]) -> ServeConfig:
    """`key=value` strings -> a checked ServeConfig: text keys (paths, the model name) as typed, whatever they
    hold; the others read as Hydra reads a value (zoo.apps.parse_key_values)."""
    # null: unset, the default
    cfg = parse_key_values(argv, ServeConfig, nullable=("api_key", "model_name", "quantize"))
    if (cfg.ckpt is None) == (cfg.hf is None):
        raise ValueError("Give one of ckpt=PATH (a training checkpoint or a zoo export folder) or "
                         "hf=FOLDER (a Hugging Face model folder).")
    for name, low in (("port", 0), ("max_batch", 1), ("max_queue", 0), ("prepare_workers", 1),
                      ("prepare_memory_mb", 64)):
        if getattr(cfg, name) < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {getattr(cfg, name)!r}.")
    for name, unit in (("timeout", "seconds"), ("prepare_timeout", "seconds"), ("max_body_mb", "MiB")):
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{name} must be a number of {unit} > 0, got {getattr(cfg, name)!r}.")
    for name in ("prepare_timeout", "max_body_mb"):  # counted in ms / bytes per request: inf has no count
        if math.isinf(getattr(cfg, name)):
            raise ValueError(f"{name} must be a finite number, got {getattr(cfg, name)!r}.")
    _check_access(cfg)
    check_device(cfg.device)
    cfg.check_quantize(cfg.device)
    return cfg


def open_served(cfg: ServeConfig) -> Served:
    """Read the model and tokenizer once, check they can be served, start the engine."""
    if cfg.ckpt is not None:
        from zoo.apps import open_model

        model, tokenizer, _ = open_model(cfg.ckpt)
        name = cfg.model_name or Path(cfg.ckpt).name
    else:
        from zoo.pretrained import from_pretrained
        from zoo.tokenizers import load_hf_tokenizer

        try:  # the tokenizer first: a folder without one fails before its weights are read
            tokenizer = load_hf_tokenizer(cfg.hf)
        except FileNotFoundError as e:
            raise ValueError(f"hf={cfg.hf}: {e}") from None
        model = from_pretrained(cfg.hf)
        name = cfg.model_name or Path(cfg.hf).resolve().name
    model = cfg.apply_quantize(model.to(cfg.device))  # a shape the kernel cannot take: refused here
    return served_model(model, tokenizer, name, max_batch=cfg.max_batch,
                        max_queue=cfg.max_queue, timeout=cfg.timeout, prepare_workers=cfg.prepare_workers,
                        prepare_timeout=cfg.prepare_timeout, prepare_memory_mb=cfg.prepare_memory_mb)


def _check_access(cfg: ServeConfig) -> None:
    """The API key: api_key=, else $ZOO_API_KEY; a host other than loopback wants one (or insecure_no_key)."""
    if cfg.api_key is None:
        cfg.api_key = os.environ.get("ZOO_API_KEY") or None
    if cfg.api_key is not None and not str(cfg.api_key).strip():
        raise ValueError("api_key must not be empty; leave it out to serve without a key.")
    cfg.api_key = None if cfg.api_key is None else str(cfg.api_key)
    if cfg.api_key is not None and (cfg.api_key != cfg.api_key.strip() or not cfg.api_key.isascii()
                                    or not cfg.api_key.isprintable()):
        # guard.key_check strips what the client sends; a header carries ASCII: no request could match
        raise ValueError("api_key must be printable ASCII without leading or trailing spaces (clients send "
                         "it in an HTTP header); no request could send this one.")
    if cfg.api_key is None and not cfg.insecure_no_key and not _loopback(cfg.host):
        raise ValueError(f"host={cfg.host} accepts connections from other machines, and no API key is set: "
                         "give api_key=<key> (or set ZOO_API_KEY) so that clients must send it, or "
                         "insecure_no_key=true to serve anyone who can reach the port.")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def served_model(model, tokenizer, name: str, *, max_batch: int = 64, max_queue: int = 256,
                 timeout: float = 600.0, prepare_workers: int = 2, prepare_timeout: float = 10.0,
                 prepare_memory_mb: int = 2048) -> Served:
    """A decoder language model and its tokenizer, ready to serve (engine and preparing processes started)."""
    config = model.config
    if not getattr(model, "causal_lm", False):
        raise ValueError(f"serve.py serves decoder language models (arch=decoder, head=lm); this model is "
                         f"arch={config.arch!r}, head={config.head.name!r}.")
    # a positional scheme whose cached keys go stale past a length (LongRoPE switches to its long factors)
    # would need the running batch re-prefilled there; the server does not, so it serves up to that length
    stale = model.positions.stale_after
    context = config.max_seq_len if stale is None else min(config.max_seq_len, stale)
    engine = Engine(model.eval(), pad_id=config.pad_id, max_batch=max_batch, max_queue=max_queue).start()
    options = dict(processes=prepare_workers, timeout=prepare_timeout, memory_mb=prepare_memory_mb)
    return Served(model, tokenizer, name, context, engine, timeout, prepare_options=options)


def start_server(served: Served, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                 **app_options):
    """Run the application (create_app's `app_options`: api_key, max_body_mb) on a background thread;
    returns (uvicorn server, thread, bound port). Stop it with `server.should_exit = True; thread.join()`."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(create_app(served, **app_options), host=host, port=port,
                                           log_level=log_level, timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, name="zoo-serving-http", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the server did not start on {host}:{port}")
        threading.Event().wait(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, bound


def main(argv: Sequence[str]) -> int:
    import uvicorn

    cfg = parse_overrides(argv)
    served = open_served(cfg)
    print(f"serving {served.name!r} (context {served.context} tokens) on http://{cfg.host}:{cfg.port}/v1",
          flush=True)
    if cfg.api_key is None and not _loopback(cfg.host):
        print(f"warning: host={cfg.host} without an API key (insecure_no_key=true): anyone who reaches the "
              "port can use the model", flush=True)
    try:
        uvicorn.run(create_app(served, api_key=cfg.api_key, max_body_mb=cfg.max_body_mb), host=cfg.host,
                    port=cfg.port, log_level=cfg.log_level)
    finally:
        served.close()
    return 0
