"""What the server serves: the model, its tokenizer and name, the context, the engine that owns the model,
the per-request timeout and the worker processes that prepare requests (one record the routes and the
responses read)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from zoo.generation.continuous.engine import Engine
from zoo.serving.endpoint import Limits
from zoo.serving.workers import Workers


@dataclass
class Served:
    """What the server serves: the model (eval mode), its tokenizer, the name clients ask for, the context
    (prompt + completion tokens), the engine that owns the model, the per-request timeout (seconds), and the
    worker processes that parse, render and tokenize requests off the event loop."""

    model: Any
    tokenizer: Any
    name: str
    context: int
    engine: Engine
    timeout: float = 600.0
    workers: Workers | None = None  # None: made from `prepare_options` (processes, timeout, memory_mb)
    prepare_options: dict[str, Any] = field(default_factory=dict)
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if self.workers is None:
            self.workers = Workers(self.tokenizer, self.limits, **self.prepare_options)

    @property
    def limits(self) -> Limits:
        return Limits(self.name, self.model.config.vocab_size, self.context)

    @property
    def stop_ids(self) -> frozenset[int]:
        eos = self.tokenizer.eos_id
        return frozenset() if eos is None else frozenset([eos])

    def close(self) -> None:
        """Stop the engine and the worker processes."""
        self.engine.close()
        self.workers.close()
