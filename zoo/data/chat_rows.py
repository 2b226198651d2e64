"""Chat SFT rows as trl writes them, each recognised by its fields: conversational ``{"messages": [...]}``
(optionally ``"tools"``), prompt-completion ``{"prompt": ..., "completion": ...}`` (both text or both
message lists) and plain ``{"text": ...}``. A row of no known format, a conversation without an assistant
turn, roles out of order or an empty completion is one ValueError naming ``file:line``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.data.readers import jsonl_values
from zoo.tokenizers.chat import MESSAGE_ROLES

# the roles that may come right before each role (system only first: checked apart)
FOLLOWS = {"user": ("system", "assistant", "tool", None), "assistant": ("user", "tool"),
           "tool": ("assistant", "tool")}


@dataclass(frozen=True)
class ChatRow:
    """One training example: its format, its content and where it was read (``file:line``)."""

    format: str  # conversation | prompt_completion | text
    where: str
    messages: tuple[dict[str, Any], ...] = ()  # conversation; prompt-completion as messages: the prompt
    completion: tuple[dict[str, Any], ...] = ()  # prompt-completion as messages
    prompt_text: str = ""  # prompt-completion as text
    text: str = ""  # text rows; prompt-completion as text: the completion
    tools: tuple[dict[str, Any], ...] | None = None

    def content(self) -> str:
        """A canonical form of the row: what the data's content hash covers."""
        return json.dumps([self.format, self.messages, self.completion, self.prompt_text, self.text,
                           self.tools], sort_keys=True, ensure_ascii=False)


def _conversation(row: dict, where: str) -> ChatRow:
    messages = check_turns(row["messages"], where, need_assistant=True)
    return ChatRow("conversation", where, messages=messages, tools=_tools(row, where))


def _prompt_completion(row: dict, where: str) -> ChatRow:
    prompt, completion = row["prompt"], row["completion"]
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion:
            raise ValueError(f"{where}: empty completion: nothing to train on")
        return ChatRow("prompt_completion", where, prompt_text=prompt, text=completion)
    if isinstance(prompt, list) and isinstance(completion, list):
        if not completion:
            raise ValueError(f"{where}: empty completion: nothing to train on")
        turns = check_turns(prompt + completion, where, need_assistant=True)
        return ChatRow("prompt_completion", where, messages=turns[: len(prompt)],
                       completion=turns[len(prompt):], tools=_tools(row, where))
    raise ValueError(f"{where}: prompt and completion must both be text or both be lists of messages, got "
                     f"{type(prompt).__name__} and {type(completion).__name__}")


def _text(row: dict, where: str) -> ChatRow:
    if not isinstance(row["text"], str) or not row["text"]:
        raise ValueError(f"{where}: field 'text' must be non-empty text, got {row['text']!r:.60}")
    return ChatRow("text", where, text=row["text"])


# fields that recognise a format -> its reader (first match wins: a conversation may carry other fields)
FORMATS: dict[tuple[str, ...], Callable[[dict, str], ChatRow]] = {
    ("messages",): _conversation, ("prompt", "completion"): _prompt_completion, ("text",): _text}


def _tools(row: dict, where: str) -> tuple[dict[str, Any], ...] | None:
    tools = row.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError(f"{where}: field 'tools' must be a list of tool schemas (objects)")
    return tuple(tools)


def check_turns(messages: Any, where: str, need_assistant: bool) -> tuple[dict[str, Any], ...]:
    """``messages`` as a conversation: known roles, content text (or absent beside tool calls),
    reasoning_content text when present (passed to the template as transformers passes it), a system turn only
    first, user / assistant / tool in an order a chat can have, and (``need_assistant``) an assistant
    turn to train on. Null-valued keys are dropped, as transformers drops them."""
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: messages must be a non-empty list of {{\"role\": ..., \"content\": ...}}")
    previous = None
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in MESSAGE_ROLES:
            raise ValueError(f"{where}: messages[{i}].role must be one of {', '.join(MESSAGE_ROLES)}, "
                             f"got {role!r}")
        content = m.get("content")
        if not (isinstance(content, str) or (content is None and m.get("tool_calls"))):
            raise ValueError(f"{where}: messages[{i}].content must be text (or null beside tool_calls), "
                             f"got {content!r:.60}")
        if m.get("reasoning_content") is not None and not isinstance(m["reasoning_content"], str):
            raise ValueError(f"{where}: messages[{i}].reasoning_content must be text (templates that read "
                             f"it, as Qwen3's, drop anything else), got {m['reasoning_content']!r:.60}")
        if role == "system" and i:
            raise ValueError(f"{where}: roles out of order: messages[{i}] is a system turn after the first")
        if role != "system" and previous not in FOLLOWS[role]:
            raise ValueError(f"{where}: roles out of order: messages[{i}] is {role} after "
                             f"{previous or 'the start'}; allowed before {role}: "
                             f"{', '.join(r or 'the start' for r in FOLLOWS[role])}")
        previous = role
    if need_assistant and not any(m["role"] == "assistant" for m in messages):
        raise ValueError(f"{where}: a conversation without an assistant turn: nothing to train on")
    return tuple({k: v for k, v in m.items() if v is not None} for m in messages)


def read_row(row: Any, where: str) -> ChatRow:
    """One decoded JSON row as a ChatRow, by its fields."""
    if isinstance(row, dict):
        for fields, reader in FORMATS.items():
            if all(f in row for f in fields):
                return reader(row, where)
    got = sorted(row) if isinstance(row, dict) else type(row).__name__
    raise ValueError(f"{where}: a row of no known format (fields {got}); known: "
                     + ", ".join("{" + ", ".join(f'"{f}"' for f in fields) + "}" for fields in FORMATS))


def read_jsonl(path: str | Path) -> Iterator[ChatRow]:
    """The rows of a JSONL file (blank lines skipped), each checked as it is read."""
    for where, row in jsonl_values(path):
        yield read_row(row, where)
