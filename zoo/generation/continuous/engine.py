"""Continuous batching: one thread owns the model and steps the running batch one token at a time. Between
two steps (a step boundary) rows that finished, were cancelled (a client went away, a stop string matched)
or ran past their deadline leave, and waiting requests join after a prefill of their own; every row then
gets one token from the same forward call; joining rows with the same prompt (a request's `n` choices, a
GRPO group) share one prefill row, copied to each. Requests wait in a bounded queue; `submit` refuses when
it is full (the server answers 429).

Each row picks its token exactly as `model.generate` does for that request alone (zoo.generation.logits'
Choice: argmax, or temperature / top-p then one multinomial draw from the row's own seeded generator), so a
request gives the same tokens whether it runs alone or among others. A row may also carry stop strings
(zoo.generation.stopping: it leaves at the token that completes one), penalties and a logit bias applied to
its logits before the pick (zoo.generation.continuous.penalties), and a wish for log-probabilities, read from
the raw logits (zoo.generation.continuous.raw_logprobs).

A failure that belongs to one row ends that row alone (finish "error", `Sequence.error` says why) and the
others go on: its penalties, its sampling, its stop-string decode, its delivery, its echo scoring, its
prefill (when the joining rows' prefill raises, each prompt is prefilled alone, so the rows whose prompt
succeeds alone still join). A sampled row whose distribution is NaN ends before the draw: its request's
fault when the model's logits were finite (its settings broke them), the server's otherwise. Only a failure
of what every row shares (the batched decode forward, the cache rebuild) ends every row in it."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from zoo.generation.continuous.batch import RunningBatch
from zoo.generation.continuous.penalties import Penalties
from zoo.generation.continuous.raw_logprobs import pick_logprobs
from zoo.generation.continuous.token_logprob import TokenLogprob
from zoo.generation.logits import Choice
from zoo.generation.stopping import RowStop
from zoo.modules.cache import KVCache

# (new token or None, finish reason or None, its log-probabilities when asked for): called on the engine
# thread; must not block. A row with `prompt_logprobs` first gets (None, None, [one per prompt token after the
# first]).
log = logging.getLogger(__name__)

Deliver = Callable[[int | None, str | None, TokenLogprob | list[TokenLogprob] | None], None]


class QueueFull(Exception):
    """The waiting queue holds `max_queue` sequences already."""


@dataclass(frozen=True)
class RowError:
    """Why one row ended early: `by_request` when its own request's settings caused it (the server answers
    400), else the server failed (500); `message` is for its client."""

    by_request: bool
    message: str


@dataclass(eq=False)
class Sequence:
    """One choice of one request: its prompt ids, budget, how it picks tokens, where its tokens go."""

    prompt: list[int]
    max_tokens: int  # >= 1 (0 only with prompt_logprobs: the prompt is scored, nothing generated)
    choice: Choice
    stop_ids: frozenset[int]
    deliver: Deliver
    deadline: float = float("inf")  # time.monotonic() after which it ends with finish "timeout"
    stop: RowStop | None = None  # stop strings: the row ends ("stop") at the token that completes one
    penalties: Penalties | None = None  # presence / frequency penalties and logit bias
    logprobs: int | None = None  # None: none; n: the picked token's log-probability and the n most likely
    prompt_logprobs: int | None = None  # echo: the prompt's tokens' log-probabilities too (n most likely)
    cancelled: bool = False  # set by the server (any thread): the row leaves at the next step boundary
    produced: int = 0
    error: RowError | None = None  # set before its finish "error" is delivered
    done: bool = field(default=False, repr=False)


class Engine:
    """The model's one owner. `submit` from any thread; `start` runs the loop in a daemon thread."""

    def __init__(self, model, *, pad_id: int, max_batch: int = 64, max_queue: int = 256) -> None:
        if max_batch < 1 or max_queue < 0:
            raise ValueError(f"max_batch must be >= 1 and max_queue >= 0, got {max_batch}, {max_queue}.")
        self.model, self.max_batch, self.max_queue = model, max_batch, max_queue
        self.batch = RunningBatch(model, pad_id)
        self.rows: list[Sequence] = []
        # (B,) each row's last token, fed at the next step
        self.pending = torch.zeros(0, dtype=torch.long, device=self.batch.device)
        self._waiting: deque[Sequence] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.steps = 0  # decode steps run (for tests and the load test)

    # ----- any thread -----
    def submit(self, seqs: list[Sequence]) -> None:
        """Queue the sequences of one request, all or none; QueueFull when they do not fit."""
        with self._cond:
            if len(self._waiting) + len(seqs) > self.max_queue:
                raise QueueFull(f"{len(self._waiting)} sequences are waiting (the bound is {self.max_queue})")
            self._waiting.extend(seqs)
            self._cond.notify()

    def load(self) -> tuple[int, int]:
        """(rows running, sequences waiting)."""
        with self._cond:
            return len(self.rows), len(self._waiting)

    def start(self) -> Engine:
        self._thread = threading.Thread(target=self._loop, name="zoo-engine", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    # ----- the engine thread -----
    def _loop(self) -> None:
        torch.set_grad_enabled(False)  # per thread: this one only decodes
        while True:
            with self._cond:
                while not self._closed and not self._waiting and not self.rows:
                    self._cond.wait()
                if self._closed:
                    return
                free = self.max_batch - sum(not s.done and not s.cancelled for s in self.rows)
                joining = [self._waiting.popleft() for _ in range(min(free, len(self._waiting)))]
            try:
                with torch.inference_mode():
                    self.step(joining)
            except Exception as e:  # what every row shares failed: end every row it touched, keep serving
                log.exception("the running batch failed; ending its %d rows", len(self.rows))
                error = RowError(False, f"the step shared by every running row (the batched forward, the "
                                        f"cache rebuild) failed ({type(e).__name__}: {e}); every row ended")
                for seq in self.rows + joining:
                    if not seq.done:
                        self._end(seq, error)
                self.rows, self.pending = [], self.pending[:0]
                self.batch.rebuild([])

    def step(self, joining: list[Sequence]) -> None:
        """One step boundary and one decode step: drop finished rows, prefill and admit `joining`, then one
        token for every row."""
        now = time.monotonic()
        keep = [i for i, seq in enumerate(self.rows) if self._alive(seq, now)]
        joining = [seq for seq in joining if self._alive(seq, now)]
        joining = [seq for seq in joining
                   if self._isolated(seq, "scoring its prompt", self._score_prompt, seq) is False]
        admitted: tuple | None = None
        prefilled = self._prefill(joining) if joining else None
        if prefilled is not None:
            joining, logits, cache, mask = prefilled
            tokens, logprobs = self._pick(joining, logits)
            for j, seq in enumerate(joining):
                if not seq.done:
                    self._isolated(seq, "handing out its token", self._emit, seq, int(tokens[j]), logprobs[j])
            live = [j for j, seq in enumerate(joining) if not seq.done]
            if live:
                index = torch.tensor(live, dtype=torch.long, device=self.batch.device)
                if len(live) < len(joining):
                    cache.reorder(index)
                admitted = ([joining[j] for j in live], tokens[index], (cache, mask.index_select(0, index)))
        if admitted is not None or len(keep) < len(self.rows):
            self.batch.rebuild(keep, admitted[2] if admitted else None)
            rows, pending = [self.rows[i] for i in keep], self.pending[keep]
            if admitted is not None:
                rows, pending = rows + admitted[0], torch.cat([pending, admitted[1]])
            with self._cond:
                self.rows, self.pending = rows, pending
        if not self.rows:
            return
        logits = self.batch.step(self.pending)  # (B, V)
        self.steps += 1
        self.pending, logprobs = self._pick(self.rows, logits)
        for seq, token, logprob in zip(self.rows, self.pending.tolist(), logprobs, strict=True):
            if not seq.done:
                self._isolated(seq, "handing out its token", self._emit, seq, token, logprob)

    def _prefill(self, joining: list[Sequence],
                 ) -> tuple[list[Sequence], torch.Tensor, KVCache, torch.Tensor] | None:
        """(rows prefilled, their logits (k, V), cache, mask (k, T)) of the joining rows, together (rows with
        the same prompt share one forward row: RunningBatch.prefill); when that forward raises, each prompt
        alone, so that only the rows of a prompt that fails by itself end (None: none is left)."""
        try:
            return (joining, *self.batch.prefill([seq.prompt for seq in joining]))
        except Exception:
            log.exception("the prefill of %d joining rows failed; prefilling each prompt alone", len(joining))
        groups: dict[tuple[int, ...], list[Sequence]] = {}
        for seq in joining:
            groups.setdefault(tuple(seq.prompt), []).append(seq)
        alone = []
        for group in groups.values():
            out = self._isolated(group[0], "prefilling its prompt", self.batch.prefill,
                                 [seq.prompt for seq in group])
            if out is not None:
                alone.append((group, out))
                continue
            for seq in group[1:]:  # the same prompt fails the same way: its other rows end with its error
                self._end(seq, group[0].error)
        if not alone:
            return None
        cache, mask = self.batch.merge([(out[1], out[2]) for _, out in alone])
        rows = [seq for group, _ in alone for seq in group]
        return rows, torch.cat([out[0] for _, out in alone]), cache, mask

    def _isolated(self, seq: Sequence, what: str, work: Callable, *args):
        """`work(*args)` for one row; when it raises, that row alone ends with a server error (None)."""
        try:
            return work(*args)
        except Exception as e:
            log.exception("%s failed for one row; the other rows go on", what)
            self._end(seq, RowError(False, f"the server failed while {what} ({type(e).__name__}: {e})"))
            return None

    @staticmethod
    def _end(seq: Sequence, error: RowError) -> None:
        """End one row with its error (finish "error"); the batch drops it at the next step boundary."""
        seq.done, seq.error = True, error
        try:
            seq.deliver(None, "error", None)
        except Exception:
            log.exception("the error of one row could not be delivered")

    def _score_prompt(self, seq: Sequence) -> bool:
        """Deliver the prompt's log-probabilities (echo) from one full forward of the prompt alone, before its
        prefill; True when that is all the row wants (max_tokens 0: it ends with "length")."""
        if seq.prompt_logprobs is None:
            return False
        ids = torch.tensor([seq.prompt], dtype=torch.long, device=self.batch.device)
        logits = self.model(ids).logits[0, :-1].float()  # (T - 1, V): each predicts the next prompt token
        n = seq.prompt_logprobs
        seq.deliver(None, None, pick_logprobs(logits, ids[0, 1:], [n] * logits.shape[0]))
        if seq.max_tokens > 0:
            return False
        seq.done = True
        seq.deliver(None, "length", None)
        return True

    @staticmethod
    def _alive(seq: Sequence, now: float) -> bool:
        if seq.done or seq.cancelled:
            return False
        if now > seq.deadline:
            seq.done = True
            seq.deliver(None, "timeout", None)
            return False
        return True

    def _pick(self, seqs: list[Sequence], logits: torch.Tensor,
              ) -> tuple[torch.Tensor, list[TokenLogprob | None]]:
        """(B, V) raw logits -> ((B,) tokens, each row's log-probabilities or None): penalised rows' logits
        adjusted first; greedy rows by one argmax, sampling rows one draw each from their own generator (a
        row that fails here is ended; its token is left as the argmax, never read)."""
        raw = logits
        adjusted = [i for i, seq in enumerate(seqs) if seq.penalties is not None]
        if adjusted:
            logits = logits.clone()
            for i in adjusted:
                row = self._isolated(seqs[i], "applying its penalties", seqs[i].penalties.apply, logits[i])
                if row is not None:
                    logits[i] = row
        tokens = logits.argmax(dim=-1)
        sampled = [i for i, seq in enumerate(seqs) if seq.choice.sample and not seq.done]
        probs = {i: self._isolated(seqs[i], "sampling", seqs[i].choice.probs, logits[i : i + 1])
                 for i in sampled}
        probs = {i: p for i, p in probs.items() if p is not None}  # each (1, V)
        if probs:  # one check (one sync) for all: a NaN distribution never reaches multinomial
            totals = torch.cat(list(probs.values())).sum(dim=-1)
            broken = (~torch.isfinite(totals) | (totals <= 0)).tolist()
            for (i, p), bad in zip(probs.items(), broken, strict=True):
                if bad:
                    self._end(seqs[i], _no_distribution(raw[i]))
                    continue
                drawn = self._isolated(seqs[i], "sampling", seqs[i].choice.draw, p)  # (1, 1)
                if drawn is not None:
                    tokens[i] = drawn[0, 0]
        return tokens, pick_logprobs(raw, tokens, [seq.logprobs for seq in seqs])

    @staticmethod
    def _emit(seq: Sequence, token: int, logprob: TokenLogprob | None = None) -> bool:
        """Hand one token to its request; True when the sequence is finished with it."""
        seq.produced += 1
        if seq.penalties is not None:
            seq.penalties.count(token)
        stopped = token in seq.stop_ids or (seq.stop is not None and seq.stop.add(token))
        finish = "stop" if stopped else "length" if seq.produced >= seq.max_tokens else None
        seq.done = finish is not None
        seq.deliver(token, finish, logprob)
        return seq.done


def _no_distribution(raw: torch.Tensor) -> RowError:
    """Why a sampled row's distribution is NaN, from its raw (V,) logits: finite ones were broken by its own
    settings (its request's fault), non-finite ones by the model (the server's)."""
    if bool(torch.isfinite(raw).all()):
        return RowError(True, "This request's sampling settings (temperature, top_p, presence_penalty, "
                              "frequency_penalty, logit_bias) turned the model's finite next-token scores "
                              "into no probability distribution (NaN); send less extreme values.")
    return RowError(False, "the model's next-token scores for this request were not finite (NaN or "
                           "infinity), so no token could be sampled")
