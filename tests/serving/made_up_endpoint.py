"""A made-up endpoint for tests/serving/test_endpoints.py, in a module of its own that imports nothing
heavy: a worker process imports it to read the endpoint each job names."""

from __future__ import annotations

from typing import Any

from zoo.serving.endpoint import Endpoint, Limits, LogprobEntry
from zoo.serving.protocol import COMMON, Field, Request


class Reverse(Endpoint):
    """A made-up endpoint: continues `text` read backwards; its choices say `reversed`."""

    name, path, route_name, prompt_param = "reverse", "/v1/reverse", "reverse", "text"
    id_prefix, object, chunk_object = "rev", "reverse", "reverse.chunk"
    fields = {**COMMON, "text": Field("string", required=True)}

    def read(self, values: dict[str, Any], request: Request) -> None:
        request.prompts = [values["text"][::-1]]

    def prompt_ids(self, tokenizer: Any, limits: Limits, request: Request) -> list[list[int]]:
        return [tokenizer.encode(p) for p in request.prompts]

    def default_max_tokens(self, limits: Limits, longest: int) -> int:
        return 3

    def logprobs(self, entries: list[LogprobEntry], decode: Any) -> dict[str, Any]:
        return {"count": len(entries)}

    def choice(self, index: int, text: str, finish: str | None, logprobs: dict[str, Any] | None, *,
               chunk: bool) -> dict[str, Any]:
        return {"index": index, "reversed": text, "finish_reason": finish, "chunk": chunk}

    def opening(self, index: int) -> dict[str, Any] | None:
        return {"index": index, "hello": True}
