"""One request in flight: its choices' tokens, as the engine delivers them, turned into OpenAI's responses,
one JSON body or server-sent events: text (stop strings cut, an echoed prompt first), finish reasons, usage,
and each choice, its log-probabilities and a stream's opening as its endpoint renders them; and the 408 / 500
of a request that failed."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from zoo.generation.continuous.engine import Sequence
from zoo.generation.continuous.token_logprob import TokenLogprob
from zoo.serving.endpoint import Endpoint, LogprobEntry
from zoo.serving.protocol import APIError, Request
from zoo.serving.served import Served
from zoo.serving.text import ChoiceText

log = logging.getLogger(__name__)


class Run:
    """One request in flight: its choices' texts as tokens arrive, as one JSON body or as SSE chunks."""

    def __init__(self, served: Served, endpoint: Endpoint, req: Request, prompts: list[list[int]],
                 seqs: list[Sequence], queue: asyncio.Queue) -> None:
        self.served, self.endpoint, self.req, self.seqs, self.queue = served, endpoint, req, seqs, queue
        count = len(prompts) * req.n
        decode = served.tokenizer.decode
        self.texts = [ChoiceText(decode, req.stop) for _ in range(count)]
        # (token, its log-probabilities (None: the first prompt token), its character offset), per choice
        self.logprobs: list[list[LogprobEntry]] = [[] for _ in range(count)]
        self.prompts = [prompts[i // req.n] for i in range(count)]
        # echo: each choice's text begins with its prompt (as given, or its ids decoded)
        self.echo = [(req.prompts[i // req.n] if isinstance(req.prompts[i // req.n], str)
                      else decode(self.prompts[i])) if req.echo else "" for i in range(count)]
        self.logprobs_sent = [0] * count  # entries already streamed, per choice
        self.echo_sent = [not req.echo] * count  # the echoed prompt went out (streaming)
        self.tokens = [0] * count
        self.finish: list[str | None] = [None if seqs else "length"] * count
        self.prompt_tokens = sum(len(p) for p in prompts)
        self.id = f"{endpoint.id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    async def events(self, poll: Callable[[], Awaitable[bool]] | None = None,
                     ) -> AsyncIterator[tuple[int, str, str | None]]:
        """(choice index, new text, finish reason or None) until every choice has finished. `poll`: checked
        each second while waiting; True (the client left) ends the run."""
        try:
            while any(f is None for f in self.finish):
                try:
                    index, token, finish, logprob = await asyncio.wait_for(self.queue.get(),
                                                                           1.0 if poll else None)
                except asyncio.TimeoutError:  # builtin TimeoutError from Python 3.11 on
                    if await poll():
                        return
                    continue
                if self.finish[index] is not None:  # ended by a stop string; the engine ran on a little
                    continue
                if isinstance(logprob, list):  # echo: the prompt's log-probabilities, before any token
                    yield index, self._prompt_scored(index, logprob), None
                    continue
                if finish is not None and token is None and finish != "length":  # "length": echo only
                    self._fail(index, finish)
                self.tokens[index] += token is not None
                keep = None if token in self.served.stop_ids else token
                if logprob is not None and keep is not None:
                    offset = len(self.echo[index]) + len(self.texts[index].text)
                    self.logprobs[index].append((keep, logprob, offset))
                delta, stopped = self.texts[index].add(keep, final=finish is not None)
                if not self.echo_sent[index]:  # echo without logprobs: the prompt goes first
                    delta, self.echo_sent[index] = self.echo[index] + delta, True
                if stopped:
                    finish = "stop"
                    self.seqs[index].cancelled = True
                self.finish[index] = finish
                yield index, delta, finish
        finally:  # done, failed, or the client went away: free every row still running
            for seq in self.seqs:
                seq.cancelled = True

    def _prompt_scored(self, index: int, scored: list[TokenLogprob]) -> str:
        """Record the prompt's tokens (the first has no log-probability) ahead of the completion's; the
        echoed prompt text, which the stream sends now."""
        prompt, decode = self.prompts[index], self.served.tokenizer.decode
        entries = [None, *scored]
        self.logprobs[index][:0] = [(t, e, len(decode(prompt[:i])))
                                    for i, (t, e) in enumerate(zip(prompt, entries, strict=True))]
        self.echo_sent[index] = True
        return self.echo[index]

    def _fail(self, index: int, finish: str) -> None:
        """The error of a choice the engine ended early: 408 past the timeout, 400 when its own settings
        caused it, else 500 (zoo.generation.continuous.engine.RowError)."""
        if finish == "timeout":
            raise APIError(408, f"The request did not finish within the server's timeout "
                                f"({self.served.timeout:g} s).", type="timeout", code="timeout")
        error = self.seqs[index].error
        if error is not None and error.by_request:
            raise APIError(400, error.message)
        raise APIError(500, f"The model failed while decoding ({error.message if error else finish}).",
                       type="server_error")

    def usage(self) -> dict[str, int]:
        done = sum(self.tokens)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": done,
                "total_tokens": self.prompt_tokens + done}

    def _logprobs(self, index: int, *, chunk: bool) -> dict[str, Any] | None:
        """The choice's log-probabilities in the endpoint's format: all of them, or (chunk) those not yet
        streamed; None when the request did not ask."""
        if self.req.logprobs is None:
            return None
        entries = self.logprobs[index][self.logprobs_sent[index] if chunk else 0:]
        if chunk:
            self.logprobs_sent[index] = len(self.logprobs[index])
        return self.endpoint.logprobs(entries, self.served.tokenizer.decode)

    def _choice(self, index: int, text: str, finish: str | None, *, chunk: bool) -> dict[str, Any]:
        return self.endpoint.choice(index, text, finish, self._logprobs(index, chunk=chunk), chunk=chunk)

    def _envelope(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        kind = self.endpoint.chunk_object if chunk else self.endpoint.object
        return {"id": self.id, "object": kind, "created": self.created, "model": self.served.name,
                "choices": choices}

    async def whole(self, poll: Callable[[], Awaitable[bool]]) -> dict[str, Any]:
        async for _ in self.events(poll):
            pass
        choices = [self._choice(i, self.echo[i] + t.text, self.finish[i], chunk=False)
                   for i, t in enumerate(self.texts)]
        return {**self._envelope(choices, False), "usage": self.usage()}

    async def sse(self) -> AsyncIterator[str]:
        """Server-sent events: the endpoint's opening chunk per choice (chat: the role), a chunk per piece of
        text, one with each choice's finish reason, the usage chunk when asked for, then `data: [DONE]`."""
        def data(body: dict[str, Any]) -> str:
            return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

        usage = {"usage": None} if self.req.include_usage else {}
        for i in range(len(self.texts)):
            first = self.endpoint.opening(i)
            if first is not None:
                yield data({**self._envelope([first], True), **usage})
        if not self.seqs:  # max_tokens 0, nothing to score: the echoed prompts (if any) are the whole answer
            for i, text in enumerate(self.echo):
                yield data({**self._envelope([self._choice(i, text, "length", chunk=True)], True), **usage})
        try:
            async for index, delta, finish in self.events():
                if delta or finish:
                    yield data({**self._envelope([self._choice(index, delta, finish, chunk=True)], True),
                                **usage})
        except APIError as e:
            yield data(e.body())
        except Exception as e:  # its own text or log-probabilities failed: an error event, not a cut stream
            log.exception("streaming one response failed")
            yield data(APIError(500, f"The server failed while streaming this response ({type(e).__name__}: "
                                     f"{e}).", type="server_error").body())
        if self.req.include_usage:
            yield data({**self._envelope([], True), "usage": self.usage()})
        yield "data: [DONE]\n\n"
