"""Prompts for online RL (task=grpo) from JSONL in trl's prompt-only format, one row a line:
`{"prompt": text}` or `{"prompt": [messages]}` (conversational: rendered through the chat template with the
generation prompt), and any other fields (`answer`, ...), which are passed to the reward functions by name
as trl passes a data set's columns. Every line is checked before any work; errors name path:line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zoo.data.chat_rows import check_turns
from zoo.data.readers import jsonl_values
from zoo.tokenizers.chat import ChatTemplateError, render_chat

if TYPE_CHECKING:
    from pathlib import Path

    from zoo.tokenizers import ZooTokenizer


@dataclass(frozen=True)
class PromptRow:
    """One prompt (text, or messages) and the row's other fields."""

    prompt: str | tuple[dict[str, Any], ...]
    fields: dict[str, Any] = field(default_factory=dict)
    where: str = ""

    @property
    def conversational(self) -> bool:
        return not isinstance(self.prompt, str)

    def content(self) -> str:
        """The row as one string (what the cache key hashes)."""
        return json.dumps({"prompt": list(self.prompt) if self.conversational else self.prompt,
                           **self.fields}, sort_keys=True)


def parse_prompt_row(value: object, where: str) -> PromptRow:
    """One JSON value as a PromptRow, or ValueError starting with `where` (file:line)."""
    if not isinstance(value, dict) or "prompt" not in value:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f"{where}: a prompt row needs the field 'prompt' (text or a list of messages); got "
                         f"{got}")
    prompt, fields = value["prompt"], {k: v for k, v in value.items() if k != "prompt"}
    for reserved in ("completion", "completions", "completion_ids", "prompts"):
        if reserved in fields:
            raise ValueError(f"{where}: field {reserved!r} is a name the reward functions are called with; "
                             "rename it")
    if isinstance(prompt, list):
        turns = check_turns(prompt, f"{where}: prompt", need_assistant=False)
        if turns[-1]["role"] == "assistant":
            raise ValueError(f"{where}: the prompt ends with an assistant turn; the completion is the "
                             "assistant's reply, so the prompt's last message is the user's (or a tool's)")
        return PromptRow(turns, fields, where)
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"{where}: field 'prompt' must be non-empty text or a list of messages, got "
                         f"{prompt!r}")
    return PromptRow(prompt, fields, where)


def read_prompts_jsonl(path: str | Path) -> list[PromptRow]:
    """Every prompt of a JSONL file (blank lines skipped); the first bad line raises naming path:line."""
    rows = [parse_prompt_row(value, where) for where, value in jsonl_values(path)]
    if not rows:
        raise ValueError(f"{path}: no prompt rows")
    return rows


def encode_prompt(row: PromptRow, tokenizer: ZooTokenizer) -> list[int]:
    """The prompt's ids: text as the tokenizer encodes it, messages rendered through the chat template with
    the generation prompt (the assistant's turn opened)."""
    if not row.conversational:
        return tokenizer.encode(row.prompt)
    if tokenizer.chat_template is None:
        raise ValueError(f"{row.where}: a conversational prompt needs a chat template; this {tokenizer.kind} "
                         "tokenizer has none (give init_from / tokenizer a Hugging Face folder with one)")
    try:
        text = render_chat(tokenizer.chat_template, list(row.prompt), tokenizer.specials.tokens,
                           add_generation_prompt=True)
    except ChatTemplateError as e:
        raise ChatTemplateError(f"{row.where}: {e}") from None
    return tokenizer.encode_chat(text)


def turn_end_id(tokenizer: ZooTokenizer) -> int | None:
    """The special token the chat template closes an assistant turn with (Qwen's <|im_end|>, Llama 3's
    <|eot_id|>, Gemma's <end_of_turn>: not always the tokenizer's eos), read off a rendered reply; None when
    the tokenizer has no chat template or no special token follows the reply."""
    if tokenizer.chat_template is None:
        return None
    mark = "Reply ends here."
    try:
        reply = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": mark}]
        text = tokenizer.chat_text(reply, add_generation_prompt=False)
    except (ChatTemplateError, ValueError):
        return None
    at = text.rfind(mark)
    after = tokenizer.encode_chat(text[at + len(mark):]) if at >= 0 else []
    special = {i for i, token in tokenizer.hf.get_added_tokens_decoder().items() if token.special}
    return after[0] if after and after[0] in special else None


def fields_bytes(row: PromptRow) -> list[int]:
    """The row's other fields as UTF-8 JSON bytes (how the cache keeps them, as a ragged row of ids)."""
    return list(json.dumps(row.fields, sort_keys=True).encode())


def fields_of(stored: Any) -> dict[str, Any]:
    """`fields_bytes` read back."""
    return json.loads(bytes(int(b) for b in stored).decode())
