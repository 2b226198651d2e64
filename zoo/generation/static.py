"""Static KV cache and a compiled one-token decode step (gpt-fast): the prompt is run once by the model's
ordinary forward (prefill) into buffers sized for prompt + new tokens; every later step runs one token per
row through the same embeddings, stack and head with fixed shapes (the key length is the whole buffer and
unwritten slots are masked), so `torch.compile` traces it once per (model, batch, buffer size) and the
position moves as a tensor, never as a recompile."""

from __future__ import annotations

import functools

import torch

from zoo.generation.prompts import position_ids
from zoo.generation.stepper import Stepper
from zoo.modules.cache import StaticKVCache
from zoo.modules.mask import AttentionMask

BUFFER_ROUND = 64  # buffer sizes are rounded up to a multiple of this, so nearby lengths share one compile


def step_mask(key_mask: torch.Tensor, index: torch.Tensor, window: int | None,
              bias: torch.Tensor | None) -> AttentionMask:
    """Mask of one query at slot `index` over the whole buffer: key_mask (B, S) is 1 for written, real
    slots; a window keeps slots index - W < j <= index (as build_mask's causal band); a score bias
    (1, H, 1, S) gets -inf where a slot is hidden."""

    def combine(allowed: torch.Tensor) -> AttentionMask:  # allowed (B, 1, 1, S)
        if bias is None:
            return AttentionMask(allowed)
        return AttentionMask(bias.masked_fill(~allowed, float("-inf")))

    allowed = key_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    full = combine(allowed)
    if window is not None:
        slots = torch.arange(key_mask.shape[-1], device=key_mask.device)
        full.local = combine(allowed & (index - slots < window))
    return full


def decode_step(model, ids: torch.Tensor, pos: torch.Tensor, index: torch.Tensor, key_mask: torch.Tensor,
                cache: StaticKVCache, memory: torch.Tensor | None,
                memory_mask: AttentionMask | None) -> torch.Tensor:
    """Next-token logits (B, V) float32 for one new token per row: ids, pos (B, 1) at buffer slot index (1,).
    No python-side checks or syncs: the stepper validated the whole run before prefill."""
    embed = model.decoder_embed
    x = embed(ids, pos)  # (B, 1, C)
    terms = embed.positional.terms(pos, index, cache.max_len, causal=True)
    mask = step_mask(key_mask, index, model.config.sliding_window, terms.bias if terms is not None else None)
    x, _, _ = model.decoder_stack(x, mask, terms, memory=memory, memory_mask=memory_mask, cache=cache)
    return model.head(x)[:, -1].float()


@functools.cache
def compiled_step():
    """torch.compile(decode_step), built once per process (torch caches its graphs per model and shape)."""
    return torch.compile(decode_step, dynamic=False)


def check_static(model, prompt_len: int, max_new_tokens: int, *, use_cache: bool, compile: bool) -> int:
    """Raise ValueError before any work when a static cache cannot serve this run; return the buffer size."""
    what = "compile=True" if compile else "cache_implementation='static'"
    if not use_cache:
        raise ValueError(f"{what} decodes with a static KV cache; it "
                         "cannot be combined with use_cache=False.")
    total = prompt_len + max_new_tokens
    reach = model.positions.max_positions
    if reach is not None and total > reach:
        raise ValueError(
            f"{what} keeps one static cache for the whole run, but prompt ({prompt_len}) + max_new_tokens "
            f"({max_new_tokens}) = {total} positions exceed what "
            f"model.positional={model.config.positional!r} covers ({reach}, model.max_seq_len); shorten the "
            f"run or use the default dynamic cache (it re-runs a sliding window)."
        )
    return -(-total // BUFFER_ROUND) * BUFFER_ROUND


class StaticStepper(Stepper):
    """Wraps an architecture's stepper: prefill through it (the model's forward, static cache in append
    mode), then one-token steps through `decode_step` (compiled or eager). Same interface as any Stepper."""

    def __init__(self, base: Stepper, max_len: int, *, compile: bool) -> None:
        self.base = base
        self.model = base.model
        base.cache = StaticKVCache(len(base.model.decoder_stack.layers), max_len)
        self.step = compiled_step() if compile else decode_step
        self.key_mask: torch.Tensor | None = None  # (B, S_max) 1 = written real slot, built after prefill

    @property
    def cache(self) -> StaticKVCache:
        return self.base.cache

    @property
    def ids(self) -> torch.Tensor:
        return self.base.ids

    @property
    def mask(self) -> torch.Tensor:
        return self.base.mask

    def next_logits(self) -> torch.Tensor:
        cache = self.cache
        if cache.length == 0:  # prefill: the model's ordinary forward fills the buffers' first columns
            return self.base.next_logits()
        length = self.ids.shape[1]
        if self.key_mask is None or self.key_mask.shape[0] != self.batch:
            self.key_mask = self.mask.new_zeros(self.batch, cache.max_len)
            self.key_mask[:, : length] = self.mask
        index = torch.tensor([length - 1], device=self.ids.device)  # slot of the newest token
        # fresh (B, 1) copies with standard strides: a column view carries the growing row stride (even at B =
        # 1, where .contiguous() keeps the view) and the stride guard would recompile every step
        ids = self.ids[:, -1:].clone(memory_format=torch.contiguous_format)
        # left pads do not count
        pos = position_ids(self.mask)[:, -1:].clone(memory_format=torch.contiguous_format)
        memory, memory_mask = self.base.step_memory()
        cache.step_index = index
        try:
            logits = self.step(self.model, ids, pos, index, self.key_mask, cache, memory, memory_mask)
        finally:
            cache.step_index = None
        cache.advance()
        return logits

    def expand(self, n: int) -> None:
        self.base.expand(n)
        if self.key_mask is not None:
            self.key_mask = self.key_mask.repeat_interleave(n, 0)

    def append(self, tokens: torch.Tensor) -> None:
        self.base.append(tokens)
        if self.key_mask is not None:
            self.key_mask[:, self.ids.shape[1] - 1] = 1

    def reorder(self, index: torch.Tensor) -> None:
        self.base.reorder(index)
        if self.key_mask is not None:
            self.key_mask = self.key_mask.index_select(0, index)
