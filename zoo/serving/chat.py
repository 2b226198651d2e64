"""/v1/chat/completions: a conversation continued by the assistant, rendered by the tokenizer's chat
template. Its fields beyond the common ones: `messages`, `max_completion_tokens` (wins over `max_tokens`),
`logprobs` (true/false) with `top_logprobs` (0-20); the completion may fill the context when no budget is
given. A stream opens each choice with the assistant's role."""

from __future__ import annotations

from typing import Any

from zoo.serving.endpoint import ENDPOINTS, Endpoint, Limits, LogprobEntry
from zoo.serving.logprobs import Decode, chat_logprobs
from zoo.serving.protocol import COMMON, APIError, Field, Request

MAX_TOP_LOGPROBS = 20  # OpenAI's bound on `top_logprobs`


class Chat(Endpoint):
    name, path, route_name, prompt_param = "chat", "/v1/chat/completions", "chat_completions", "messages"
    id_prefix, object, chunk_object = "chatcmpl", "chat.completion", "chat.completion.chunk"
    fields = {**COMMON, "messages": Field("messages", required=True), "max_completion_tokens":
              Field("integer", low=0), "logprobs": Field("boolean", False),
              "top_logprobs": Field("integer", low=0, high=MAX_TOP_LOGPROBS)}

    def read(self, values: dict[str, Any], request: Request) -> None:
        request.messages = values["messages"]
        if values["max_completion_tokens"] is not None:
            request.max_tokens = values["max_completion_tokens"]
        if values["top_logprobs"] is not None and not values["logprobs"]:
            raise APIError(400, "Invalid 'top_logprobs': it needs 'logprobs' set to true.",
                           param="top_logprobs")
        if values["logprobs"]:
            request.logprobs = values["top_logprobs"] or 0

    def prompt_ids(self, tokenizer: Any, limits: Limits, request: Request) -> list[list[int]]:
        """One prompt: the messages under the tokenizer's chat template."""
        try:
            return [tokenizer.chat_ids(_text_parts(request.messages))]
        except ValueError as e:  # a bad message, or the template failed (ChatTemplateError is a ValueError)
            raise APIError(400, f"Invalid 'messages': {e}", param="messages") from None

    def default_max_tokens(self, limits: Limits, longest: int) -> int:
        return limits.context - longest

    def logprobs(self, entries: list[LogprobEntry], decode: Decode) -> dict[str, Any]:
        return chat_logprobs([(t, lp) for t, lp, _ in entries], decode)

    def choice(self, index: int, text: str, finish: str | None, logprobs: dict[str, Any] | None, *,
               chunk: bool) -> dict[str, Any]:
        key, message = ("delta", {"content": text}) if chunk else ("message",
                                                                   {"role": "assistant", "content": text})
        return {"index": index, key: message, "logprobs": logprobs, "finish_reason": finish}

    def opening(self, index: int) -> dict[str, Any] | None:
        return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                "finish_reason": None}


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


ENDPOINTS.register(Chat.name, Chat())
