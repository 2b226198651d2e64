"""What the server serves: the model, its tokenizer and name, the context, the engine that owns the model and
the per-request timeout (one record the routes and the responses read)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from zoo.serving.engine import Engine


@dataclass
class Served:
    """What the server serves: the model (eval mode), its tokenizer, the name clients ask for, the context
    (prompt + completion tokens), the engine that owns the model, and the per-request timeout (seconds)."""

    model: Any
    tokenizer: Any
    name: str
    context: int
    engine: Engine
    timeout: float = 600.0
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def stop_ids(self) -> frozenset[int]:
        eos = self.tokenizer.eos_id
        return frozenset() if eos is None else frozenset([eos])
