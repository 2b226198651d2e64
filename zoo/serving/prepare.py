"""A request body made ready for the engine: JSON parsed, fields checked, chat rendered by the tokenizer's
template, text encoded, lengths checked against the context. A pure function of the body, the tokenizer and
the served model's limits, so it can run in a worker process (zoo.serving.workers) where a hostile template or
a huge prompt costs nobody else anything. Every refusal is an APIError (OpenAI's 4xx body)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zoo.serving.protocol import APIError, Request, parse_json, read_request

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat defaults to the context left


@dataclass(frozen=True)
class Limits:
    """What a request is checked against: the served name, the vocabulary size, the context (prompt +
    completion tokens)."""

    name: str
    vocab_size: int
    context: int


@dataclass
class Prepared:
    """A checked request, each prompt's token ids and the completion budget every choice gets."""

    request: Request
    prompts: list[list[int]]
    max_tokens: int


def prepare(raw: bytes, endpoint: str, tokenizer: Any, limits: Limits) -> Prepared:
    """Body bytes -> a Prepared request, or the APIError that refuses it."""
    req = read_request(parse_json(raw), endpoint)
    check_model(limits, req.model)
    bad = [t for t in req.logit_bias if t >= limits.vocab_size]
    if bad:
        raise APIError(400, f"Invalid key in 'logit_bias': {bad[0]} is not a token id of this model (its "
                            f"vocabulary is [0, {limits.vocab_size})).", param="logit_bias",
                       code="invalid_value")
    prompts = _prompt_ids(tokenizer, limits, req)
    return Prepared(req, prompts, _max_tokens(limits, req, prompts))


def check_model(limits: Limits, name: str) -> None:
    if name != limits.name:
        raise APIError(404, f"The model `{name}` does not exist; this server serves `{limits.name}`.",
                       param="model", code="model_not_found")


def _prompt_ids(tok: Any, limits: Limits, req: Request) -> list[list[int]]:
    """Token ids of each prompt: text encoded without special tokens (as generate.py does), token ids as
    given (checked against the vocabulary), a chat under the tokenizer's chat template."""
    if req.endpoint == "chat":
        try:
            return [tok.chat_ids(_text_parts(req.messages))]
        except ValueError as e:  # a bad message, or the template failed (ChatTemplateError is a ValueError)
            raise APIError(400, f"Invalid 'messages': {e}", param="messages") from None
    prompts = []
    for i, prompt in enumerate(req.prompts):
        if not isinstance(prompt, str) and len(prompt) >= limits.context:  # before looking at each id
            _too_long(limits, req, len(prompt), req.max_tokens or 0)
        ids = tok.encode(prompt) if isinstance(prompt, str) else prompt
        if not ids:
            raise APIError(400, f"Invalid 'prompt': prompt {i} encodes to no tokens; give some text.",
                           param="prompt")
        bad = [t for t in ids if not 0 <= t < limits.vocab_size]
        if bad:
            raise APIError(400, f"Invalid 'prompt': token ids {bad[:5]} are outside the vocabulary "
                                f"[0, {limits.vocab_size}).", param="prompt")
        prompts.append(ids)
    return prompts


def _text_parts(messages: list[Any]) -> list[Any]:
    """OpenAI's content parts ([{"type": "text", "text": ...}, ...]) joined into one string per message."""
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                             and isinstance(p.get("text"), str) for p in content):
            m = {**m, "content": "".join(p["text"] for p in content)}
        out.append(m)
    return out


def _max_tokens(limits: Limits, req: Request, prompts: list[list[int]]) -> int:
    longest = max(len(p) for p in prompts)
    default = COMPLETION_DEFAULT_MAX_TOKENS if req.endpoint == "completion" else limits.context - longest
    wanted = default if req.max_tokens is None else req.max_tokens
    if longest + max(wanted, 0) > limits.context or longest >= limits.context:
        _too_long(limits, req, longest, wanted)
    return wanted


def _too_long(limits: Limits, req: Request, longest: int, wanted: int) -> None:
    param = "messages" if req.endpoint == "chat" else "prompt"
    raise APIError(400, f"This model's maximum context length is {limits.context} tokens. However, you "
                        f"requested {longest + wanted} tokens ({longest} in the {param}, {wanted} in the "
                        "completion). Please reduce the length of the prompt or the completion.",
                   param=param, code="context_length_exceeded")
