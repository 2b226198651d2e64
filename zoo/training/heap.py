"""An entry script's import heap kept out of Python's cyclic garbage collector (issue 42): importing
Lightning (torch, torch._dynamo, torchmetrics and what it pulls) makes ~470,000 objects that each full
collection walks again, 1 s of CPU during the imports and 1.4 s at interpreter exit; torch and torch._dynamo
alone (generate.py, export.py, serve.py) ~300,000, 0.5 s in a run and 0.7 s at exit. Used by train.py,
evaluate.py, generate.py, export.py, serve.py and inspect_model.py, for the script's own process only: frozen
objects are never collected, so a caller's heap (a test calling train.py's main, a module importing
evaluate.py) is left alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def imports_frozen(enabled: bool = True) -> Iterator[None]:
    """Pause the cyclic collector while the block imports, then freeze what is alive (gc.freeze): later
    collections, the exit's included, skip it. The cyclic garbage the imports leave (~14,000 objects, ~9 MB)
    is kept, not collected; reference counting still frees everything else as before."""
    if not enabled:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


def import_checkpoint_opening() -> None:
    """Import what opening a checkpoint imports anyway, so that a freeze around it covers that heap too:
    torch._dynamo (~120,000 objects), which torch.nn.init pulls in under the meta-device build of
    zoo.checkpoint. Called inside `imports_frozen` by the scripts that open one."""
    import torch._dynamo  # noqa: F401
