"""Tokens from the engine thread to the HTTP event loop: items posted during one decode step are handed over
in one wake-up of the loop (one `call_soon_threadsafe`, one write to its self-pipe), not one per row."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class Mailbox:
    """Thread-safe: `post(queue, item)` from any thread puts `item` on the asyncio `queue` of `loop` soon."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: list[tuple[asyncio.Queue, Any]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def post(self, queue: asyncio.Queue, item: Any) -> None:
        with self._lock:
            self._items.append((queue, item))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop has closed (the server is shutting down): nobody is listening
            pass

    def _drain(self) -> None:
        with self._lock:
            items, self._items, self._scheduled = self._items, [], False
        for queue, item in items:
            queue.put_nowait(item)
