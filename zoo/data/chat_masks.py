"""Which tokens of a chat row are trained: the rendered text's spans, and the loss-mask registry over them.

A row is rendered once (``render_row``) into its text and its spans: the assistant turns and, for a
prompt-completion row, the completion. A template with ``{% generation %}`` blocks gives the assistant spans
itself, as transformers' ``return_assistant_tokens_mask`` reads them; for one without, the assistant turn
``i`` is the text that ``messages[:i + 1]`` adds to ``messages[:i]`` rendered with the generation prompt, and
each such span must start and end on token boundaries of the whole chat, else the template cannot mark the
assistant (one error naming it). A closing written only after the last message (Phi-3.5's ``eos_token``) is
not part of an earlier turn: its span ends at the last token the two renderings share. ``LOSS_MASKS``
(``data.loss_mask``) picks spans: ``assistant_only``, ``last_turn``, ``completion_only``, ``all``; ``auto`` is
each format's default."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from zoo.data.chat_rows import ChatRow
from zoo.registry import Registry
from zoo.tokenizers import ZooTokenizer
from zoo.tokenizers.chat import generation_spans, render_chat

Span = tuple[int, int]  # characters [start, end) of the rendered text


@dataclass(frozen=True)
class Rendered:
    """A row's text and its spans (characters); ``eos``: an end token follows the text (text formats)."""

    text: str
    assistant: tuple[Span, ...] = ()
    completion: tuple[Span, ...] = ()
    eos: bool = False
    checked: bool = False  # spans found from prefixes: they must fall on token boundaries
    soft_ends: frozenset[int] = frozenset()  # turn ends cut where texts stop agreeing: back to a token's end


class LossMask:
    """One ``data.loss_mask`` choice: the spans of a rendered row it trains, for the formats it applies to."""

    name = ""
    formats: tuple[str, ...] = ()

    def spans(self, rendered: Rendered) -> Sequence[Span]:
        raise NotImplementedError


LOSS_MASKS: Registry[LossMask] = Registry("loss mask", key="data.loss_mask")
DEFAULT_MASK = {"conversation": "assistant_only", "prompt_completion": "completion_only", "text": "all"}


def _register(cls: type[LossMask]) -> type[LossMask]:
    LOSS_MASKS.register(cls.name, cls())
    return cls


@_register
class AssistantOnly(LossMask):
    name, formats = "assistant_only", ("conversation",)

    def spans(self, rendered: Rendered) -> Sequence[Span]:
        return rendered.assistant


@_register
class LastTurn(LossMask):
    name, formats = "last_turn", ("conversation",)

    def spans(self, rendered: Rendered) -> Sequence[Span]:
        return rendered.assistant[-1:]


@_register
class CompletionOnly(LossMask):
    name, formats = "completion_only", ("prompt_completion",)

    def spans(self, rendered: Rendered) -> Sequence[Span]:
        return rendered.completion


@_register
class All(LossMask):
    name, formats = "all", ("conversation", "prompt_completion", "text")

    def spans(self, rendered: Rendered) -> Sequence[Span]:
        return ((0, len(rendered.text)),)


def mask_for(name: str, row: ChatRow) -> LossMask:
    """The LossMask ``name`` (``auto``: the row format's default), refused for a format it does not fit."""
    mask = LOSS_MASKS.get(DEFAULT_MASK[row.format] if name == "auto" else name)
    if row.format not in mask.formats:
        raise ValueError(f"{row.where}: data.loss_mask={name} applies to {' or '.join(mask.formats)} rows, "
                         f"this row is {row.format}; allowed for it: auto|"
                         + "|".join(m for m in LOSS_MASKS.names() if row.format in LOSS_MASKS.get(m).formats))
    return mask


def _added(before: str, after: str, row: ChatRow, what: str) -> Span:
    """The span ``after`` adds to ``before``; a template that rewrites earlier text cannot mark it."""
    if not after.startswith(before):
        raise ValueError(f"{row.where}: the chat template cannot mark the {what}: rendering one more turn "
                         "changes the text before it (no {% generation %} markers to read either); use "
                         "data.loss_mask=all or a template with {% generation %} markers")
    return len(before), len(after)


def _turn_end(upto: str, text: str, row: ChatRow) -> tuple[int, bool]:
    """Where the chat ``upto`` (up to and with an assistant turn) ends in the whole ``text``, and whether it
    was cut: all of ``upto`` when ``text`` goes on from it; else where the two stop agreeing, when the rest
    of ``upto`` is a closing the template writes only after the last message, which ``text`` ends with too
    (Phi-3.5's eos_token); anything else rewrote earlier text."""
    if text.startswith(upto):
        return len(upto), False
    common = len(os.path.commonprefix([upto, text]))
    if not text.endswith(upto[common:]):
        _added(upto, text, row, "assistant")  # raises: the template changed the turn's own text
    return common, True


def render_row(tokenizer: ZooTokenizer, row: ChatRow) -> Rendered:
    """``row``'s text and spans under ``tokenizer``'s chat template (module docstring)."""
    if row.format == "text":
        return Rendered(row.text, eos=True)
    if not row.messages and not row.completion:  # prompt-completion as text
        start = len(row.prompt_text)
        return Rendered(row.prompt_text + row.text, completion=((start, start + len(row.text)),), eos=True)
    if tokenizer.chat_template is None:
        raise ValueError(f"{row.where}: a {row.format} row needs a chat template; this {tokenizer.kind} "
                         "tokenizer has none (give init_from / tokenizer a Hugging Face folder with one)")
    messages = [*row.messages, *row.completion]
    tools = list(row.tools) if row.tools is not None else None

    def render(turns: list, prompt: bool) -> str:
        return render_chat(tokenizer.chat_template, turns, tokenizer.specials.tokens,
                           add_generation_prompt=prompt, tools=tools)

    text = render(messages, False)
    completion = ()
    if row.completion:
        completion = (_added(render(list(row.messages), True), text, row, "completion"),)
    marked = generation_spans(tokenizer.chat_template, messages, tokenizer.specials.tokens, tools=tools)
    if marked is not None:
        return Rendered(marked[0], tuple(marked[1]), completion)
    assistant, soft = [], set()
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            upto = render(messages[: i + 1], False)
            start, _ = _added(render(messages[:i], True), upto, row, "assistant")
            end, cut = _turn_end(upto, text, row)
            assistant.append((start, end))
            soft |= {end} if cut else set()
    return Rendered(text, tuple(assistant), completion, checked=True, soft_ends=frozenset(soft))


def encode_row(tokenizer: ZooTokenizer, row: ChatRow, mask_name: str) -> tuple[list[int], list[int]]:
    """(token ids, 1 where the loss is taken) of ``row`` under ``data.loss_mask=mask_name``: a token is
    trained when its characters overlap a chosen span (transformers' rule for generation blocks)."""
    rendered = render_row(tokenizer, row)
    spans = mask_for(mask_name, row).spans(rendered)
    if row.format == "text" or (row.format == "prompt_completion" and not row.completion):
        encoding = tokenizer.hf.encode(rendered.text, add_special_tokens=False)
    else:
        encoding = tokenizer.chat_encoding(rendered.text)
    ids, offsets = list(encoding.ids), np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
    if rendered.soft_ends:  # a cut end inside a token (Phi's '<|' of both <|endoftext|> and <|user|>)
        spans = [(start, _token_end_before(offsets, end, start) if end in rendered.soft_ends else end)
                 for start, end in spans]
    if rendered.checked:
        _check_boundaries(offsets, spans, row, tokenizer)
    trained = np.zeros(len(ids), dtype=bool)
    for start, end in spans:
        trained |= (offsets[:, 0] < end) & (offsets[:, 1] > start)
    mask = trained.astype(int).tolist()
    if rendered.eos and tokenizer.eos_id is not None:
        ids.append(tokenizer.eos_id)
        mask.append(1 if spans else 0)
    return ids, mask


def _token_end_before(offsets: np.ndarray, end: int, start: int) -> int:
    """The last token end of the whole chat at or before character ``end`` (not before ``start``)."""
    ends = offsets[:, 1][(offsets[:, 1] <= end) & (offsets[:, 1] >= start)]
    return int(ends.max()) if len(ends) else start


def _check_boundaries(offsets: np.ndarray, spans: Sequence[Span], row: ChatRow,
                      tokenizer: ZooTokenizer) -> None:
    """Each span found from prefixes starts and ends where tokens do (no token straddles its edges)."""
    for start, end in spans:
        for edge in (start, end):
            straddles = (offsets[:, 0] < edge) & (offsets[:, 1] > edge)
            if straddles.any():
                raise ValueError(f"{row.where}: the chat template cannot mark the assistant: a token of the "
                                 f"rendered chat ({tokenizer!r}) straddles the turn's edge at character "
                                 f"{edge}, so the turn does not tokenise alone; use a template with "
                                 "{% generation %} markers or data.loss_mask=all")
