"""A request body made ready for the engine: JSON parsed, fields checked, the prompt made token ids by its
endpoint (chat rendered by the tokenizer's template, text encoded), lengths checked against the context. A
pure function of the body, its endpoint, the tokenizer and the served model's limits, so it can run in a
worker process (zoo.serving.workers) where a hostile template or a huge prompt costs nobody else anything.
Every refusal is an APIError (OpenAI's 4xx body)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zoo.serving.endpoint import Endpoint, Limits
from zoo.serving.protocol import APIError, Request, parse_json

__all__ = ["Limits", "Prepared", "check_model", "prepare"]


@dataclass
class Prepared:
    """A checked request, each prompt's token ids and the completion budget every choice gets."""

    request: Request
    prompts: list[list[int]]
    max_tokens: int


def prepare(raw: bytes, endpoint: Endpoint, tokenizer: Any, limits: Limits) -> Prepared:
    """Body bytes -> a Prepared request, or the APIError that refuses it."""
    req = endpoint.read_request(parse_json(raw))
    check_model(limits, req.model)
    bad = [t for t in req.logit_bias if t >= limits.vocab_size]
    if bad:
        raise APIError(400, f"Invalid key in 'logit_bias': {bad[0]} is not a token id of this model (its "
                            f"vocabulary is [0, {limits.vocab_size})).", param="logit_bias",
                       code="invalid_value")
    prompts = endpoint.prompt_ids(tokenizer, limits, req)
    return Prepared(req, prompts, _max_tokens(endpoint, limits, req, prompts))


def check_model(limits: Limits, name: str) -> None:
    if name != limits.name:
        raise APIError(404, f"The model `{name}` does not exist; this server serves `{limits.name}`.",
                       param="model", code="model_not_found")


def _max_tokens(endpoint: Endpoint, limits: Limits, req: Request, prompts: list[list[int]]) -> int:
    longest = max(len(p) for p in prompts)
    wanted = endpoint.default_max_tokens(limits, longest) if req.max_tokens is None else req.max_tokens
    if longest + max(wanted, 0) > limits.context or longest >= limits.context:
        endpoint.too_long(limits, longest, wanted)
    return wanted
