"""Preference pairs from JSONL in trl's preference format, one row a line: `{"prompt", "chosen", "rejected"}`,
or `{"chosen", "rejected"}` with the prompt implicit (their common prefix, cut as trl's `extract_prompt`
cuts it); each field text, or (conversational) a list of messages, with an optional `"tools"` list. A row of
no known format, a pair whose completions are equal, an empty completion, or messages whose roles cannot
form a chat ending in the assistant's completion is one ValueError naming file:line, before any work."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from zoo.data.chat_rows import check_turns
from zoo.data.readers import jsonl_values
from zoo.tokenizers.chat import ChatTemplateError, render_chat

if TYPE_CHECKING:
    from pathlib import Path

    from zoo.tokenizers import ZooTokenizer

FORMATS = ("prompt/chosen/rejected", "chosen/rejected (implicit prompt)")
Turns = tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class PreferenceRow:
    """One pair: the prompt and the two completions that follow it, the first preferred; all three text, or
    all three messages (conversational, rendered through the chat template with `tools`)."""

    prompt: str | Turns
    chosen: str | Turns
    rejected: str | Turns
    tools: Turns | None = None
    where: str = field(default="", compare=False)  # file:line, for errors found when it is encoded

    @property
    def conversational(self) -> bool:
        return not isinstance(self.chosen, str)

    def content(self) -> str:
        """A canonical form of the pair: what the data's content hash covers."""
        if not self.conversational:
            return "\x00".join((self.prompt, self.chosen, self.rejected))
        return json.dumps([self.prompt, self.chosen, self.rejected, self.tools], sort_keys=True,
                          ensure_ascii=False)


def implicit_prompt(chosen: Sequence, rejected: Sequence) -> tuple[Any, Any, Any]:
    """(prompt, chosen, rejected): the common prefix (of characters, or of messages) is the prompt; a space
    just before the first difference goes with the completions (trl's extract_prompt)."""
    idx = 0
    for idx in range(min(len(chosen), len(rejected))):  # noqa: B007  (the index the loop stops at is used)
        if chosen[idx] != rejected[idx]:
            if chosen[idx - 1] == " ":
                idx -= 1
            break
    return chosen[:idx], chosen[idx:], rejected[idx:]


def _conversational(row: dict, where: str) -> PreferenceRow:
    """A row whose fields are lists of messages: each completion an assistant turn (or turns) after the
    prompt, checked as a chat (zoo.data.chat_rows.check_turns)."""
    texts = [k for k in ("prompt", "chosen", "rejected") if k in row and not isinstance(row[k], list)]
    if texts:
        raise ValueError(f"{where}: field {texts[0]!r} is {type(row[texts[0]]).__name__} beside lists of "
                         "messages: prompt, chosen and rejected must all be text or all lists of messages")
    if "prompt" in row:
        prompt, chosen, rejected = row["prompt"], row["chosen"], row["rejected"]
    else:
        prompt, chosen, rejected = implicit_prompt(row["chosen"], row["rejected"])
    if not prompt:
        raise ValueError(f"{where}: a conversational pair needs a prompt (messages before the completions)"
                         + ("" if "prompt" in row else "; chosen and rejected share no first message"))
    checked = []
    for name, completion in (("chosen", chosen), ("rejected", rejected)):
        if not completion:
            raise ValueError(f"{where}: the {name} completion has no messages"
                             + ("" if "prompt" in row else " once the common prefix (the prompt) is cut"))
        turns = check_turns(prompt + completion, f"{where}: prompt + {name}", need_assistant=True)
        if turns[len(prompt)]["role"] != "assistant":
            raise ValueError(f"{where}: the {name} completion starts with a {turns[len(prompt)]['role']} "
                             "turn; a completion is the assistant's reply (its first message's role must be "
                             "assistant)")
        checked.append(turns)
    n = len(prompt)
    if checked[0][n:] == checked[1][n:]:
        raise ValueError(f"{where}: chosen and rejected are the same messages: the pair prefers nothing")
    tools = row.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ValueError(f"{where}: field 'tools' must be a list of tool schemas (objects)")
    return PreferenceRow(checked[0][:n], checked[0][n:], checked[1][n:],
                         tuple(tools) if tools is not None else None, where)


def parse_row(row: object, where: str) -> PreferenceRow:
    """One JSON value as a pair, or ValueError starting with `where` (file:line)."""
    if not isinstance(row, dict) or not {"chosen", "rejected"} <= set(row):
        fields = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise ValueError(f"{where}: a preference row needs the fields {' or '.join(FORMATS)}; got {fields}")
    unknown = set(row) - {"prompt", "chosen", "rejected", "tools"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; a preference row has "
                         f"{' or '.join(FORMATS)} (and 'tools' with messages)")
    if any(isinstance(row[k], list) for k in ("prompt", "chosen", "rejected") if k in row):
        return _conversational(row, where)
    if "tools" in row:
        raise ValueError(f"{where}: field 'tools' is read only with messages (the chat template renders "
                         "it); this row's prompt and completions are text")
    bad = [k for k, v in row.items() if not isinstance(v, str)]
    if bad:
        raise ValueError(f"{where}: field {bad[0]!r} must be text or a list of messages, got "
                         f"{type(row[bad[0]]).__name__}")
    if "prompt" in row:
        prompt, chosen, rejected = row["prompt"], row["chosen"], row["rejected"]
    else:
        prompt, chosen, rejected = implicit_prompt(row["chosen"], row["rejected"])
    if chosen == rejected:
        raise ValueError(f"{where}: chosen and rejected are the same text {chosen!r}: the pair prefers "
                         "nothing")
    for name, text in (("chosen", chosen), ("rejected", rejected)):
        if not text:
            raise ValueError(f"{where}: the {name} completion is empty"
                             + ("" if "prompt" in row else " once the common prefix (the prompt) is cut"))
    return PreferenceRow(prompt, chosen, rejected, where=where)


def read_preference_jsonl(path: str | Path) -> list[PreferenceRow]:
    """Every pair of a JSONL file (blank lines skipped); the first bad line raises naming path:line."""
    rows = [parse_row(value, where) for where, value in jsonl_values(path)]
    if not rows:
        raise ValueError(f"{path}: no preference rows")
    return rows


@dataclass(frozen=True)
class EncodedPair:
    """Token ids of one pair: the prompt, and each completion (with its eos) that follows it; with
    dpo.reference=precomputed, the reference's summed log-probs of each completion."""

    prompt: list[int]
    chosen: list[int]
    rejected: list[int]
    ref_chosen: float | None = None
    ref_rejected: float | None = None


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def encode_pair(row: PreferenceRow, encode: Callable[[str], list[int]], eos_id: int) -> EncodedPair:
    """Ids of a text `row`: prompt+completion are tokenised whole (tokens may merge across the boundary), and
    the completion starts where they leave the tokenised prompt (trl's rule)."""
    prompt = encode(row.prompt)
    chosen = encode(row.prompt + row.chosen) + [eos_id]
    rejected = encode(row.prompt + row.rejected) + [eos_id]
    return _split_at_prompt(prompt, chosen, rejected)


def encode_chat_pair(row: PreferenceRow, tokenizer: ZooTokenizer) -> EncodedPair:
    """Ids of a conversational `row` as trl's DPOTrainer makes them: the prompt rendered with the generation
    prompt, prompt+completion rendered without (the template writes each turn's end, so no eos is added),
    and the completion starting where they leave the rendered prompt. A template that refuses the row (its
    raise_exception) is one error naming the row's file:line."""
    where = row.where or "a conversational pair"
    if tokenizer.chat_template is None:
        raise ValueError(f"{where}: a conversational pair needs a chat template; this {tokenizer.kind} "
                         "tokenizer has none (give init_from / tokenizer a Hugging Face folder with one)")
    tools = list(row.tools) if row.tools is not None else None

    def ids(turns: Turns, prompt: bool) -> list[int]:
        try:
            text = render_chat(tokenizer.chat_template, list(turns), tokenizer.specials.tokens,
                               add_generation_prompt=prompt, tools=tools)
        except ChatTemplateError as e:
            raise ChatTemplateError(f"{where}: {e}") from None
        return tokenizer.encode_chat(text)

    return _split_at_prompt(ids(row.prompt, True), ids(row.prompt + row.chosen, False),
                            ids(row.prompt + row.rejected, False))


def encode_preference(row: PreferenceRow, tokenizer: ZooTokenizer) -> EncodedPair:
    """`row`'s ids under `tokenizer`: through the chat template when it is conversational, else as text
    with the tokenizer's eos after each completion."""
    if row.conversational:
        return encode_chat_pair(row, tokenizer)
    return encode_pair(row, tokenizer.encode, tokenizer.eos_id)


def _split_at_prompt(prompt: list[int], chosen: list[int], rejected: list[int]) -> EncodedPair:
    n = min(common_prefix_length(prompt, chosen), common_prefix_length(prompt, rejected))
    return EncodedPair(prompt[:n], chosen[n:], rejected[n:])


def collate_pairs(pairs: Sequence[EncodedPair], pad_id: int) -> dict[str, torch.Tensor]:
    """input_ids, attention_mask, completion_mask (2B, T): the B prompt+chosen rows, then the B
    prompt+rejected rows, right-padded to the longest; ref_chosen_logps, ref_rejected_logps (B,) when the
    pairs carry precomputed reference log-probs."""
    rows = [p.prompt + p.chosen for p in pairs] + [p.prompt + p.rejected for p in pairs]
    marks = [[0] * len(p.prompt) + [1] * len(p.chosen) for p in pairs] + \
        [[0] * len(p.prompt) + [1] * len(p.rejected) for p in pairs]
    length = max(len(r) for r in rows)
    out = {"input_ids": torch.full((len(rows), length), pad_id, dtype=torch.long),
           "attention_mask": torch.zeros(len(rows), length, dtype=torch.long),
           "completion_mask": torch.zeros(len(rows), length, dtype=torch.long)}
    for i, (ids, mark) in enumerate(zip(rows, marks, strict=True)):
        out["input_ids"][i, :len(ids)] = torch.tensor(ids)
        out["attention_mask"][i, :len(ids)] = 1
        out["completion_mask"][i, :len(ids)] = torch.tensor(mark)
    if pairs and all(p.ref_chosen is not None for p in pairs):
        out["ref_chosen_logps"] = torch.tensor([p.ref_chosen for p in pairs], dtype=torch.float32)
        out["ref_rejected_logps"] = torch.tensor([p.ref_rejected for p in pairs], dtype=torch.float32)
    return out
