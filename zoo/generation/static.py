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
    window = getattr(model.config.mixer, "sliding_window", None)
    mask = step_mask(key_mask, index, window, terms.bias if terms is not None else None)
    x, _, _ = model.decoder_stack(x, mask, terms, memory=memory, memory_mask=memory_mask, cache=cache)
    return model.head(x)[:, -1].float()


def fused_step(model, ids: torch.Tensor, pos: torch.Tensor, index: torch.Tensor, key_mask: torch.Tensor,
               cache: StaticKVCache, memory: torch.Tensor | None,
               memory_mask: AttentionMask | None) -> tuple[torch.Tensor, ...]:
    """`decode_step` with the step's bookkeeping inside the same graph, so a compiled run makes no per-token
    host work: mark slot `index` written in key_mask (in place), compute the logits, pick the greedy token
    (always: one graph serves greedy and sampling, which draws outside from the caller's generator) and move
    position and slot on by one. Returns (logits (B, V), greedy tokens (B,), next pos (B, 1), next index
    (1,))."""
    key_mask.index_fill_(1, index, 1)
    logits = decode_step(model, ids, pos, index, key_mask, cache, memory, memory_mask)
    return logits, logits.argmax(dim=-1), pos + 1, index + 1


GRAPHS_PER_PROCESS = 64  # compiled step graphs kept per process: one per (model, batch, buffer size)


@functools.cache
def compiled_step():
    """torch.compile(fused_step), built once per process (torch caches its graphs per model and shape). Every
    (model, batch, buffer size) is one more graph of this one function; torch's default limit (8 per
    function) would make the ninth run silently eager, so the limit is raised to GRAPHS_PER_PROCESS."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, GRAPHS_PER_PROCESS)
    return torch.compile(fused_step, dynamic=False)


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
            f"model.positional={model.config.positional.name} covers ({reach}, model.max_seq_len); shorten "
            f"the run or use the default dynamic cache (it re-runs a sliding window)."
        )
    stale = model.positions.stale_after
    if stale is not None and prompt_len <= stale < total:
        raise ValueError(
            f"{what} keeps one static cache for the whole run, but model.positional.scaling="
            f"{model.config.positional.scaling.name} changes its frequencies once the sequence passes "
            f"model.positional.scaling.original_max_len={stale} (prompt {prompt_len} + max_new_tokens "
            f"{max_new_tokens} = {total}), which needs the keys recomputed; use the default dynamic cache "
            f"(it re-runs the sequence once there)."
        )
    return -(-total // BUFFER_ROUND) * BUFFER_ROUND


class StaticStepper(Stepper):
    """Wraps an architecture's stepper: prefill through it (the model's forward, static cache in append
    mode), then one-token steps through `fused_step` (compiled or eager). Same interface as any Stepper;
    after prefill the step's inputs live as tensors (newest token, its position and slot, the written-slot
    mask) that the step itself moves on, so a step costs no host-side bookkeeping."""

    check_every = 8  # greedy / sampling loops look at "all rows finished?" (a host sync) every 8 tokens

    def __init__(self, base: Stepper, max_len: int, *, compile: bool) -> None:
        self.base = base
        self.model = base.model
        base.cache = StaticKVCache(len(base.model.decoder_stack.layers), max_len)
        self.step = compiled_step() if compile else fused_step
        # decode-step state, built at the first step after prefill: key_mask (B, S_max) 1 = written real slot;
        # pos (B, 1) position of the newest token, index (1,) its slot, newest (B, 1) the token itself
        self.key_mask: torch.Tensor | None = None
        self.pos: torch.Tensor | None = None
        self.index: torch.Tensor | None = None
        self.newest: torch.Tensor | None = None

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
        return self.next_tokens(greedy=False)[0]

    def next_tokens(self, greedy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits (B, V), greedy tokens (B,) or None); after prefill one `fused_step`."""
        cache = self.cache
        if cache.length == 0:  # prefill: the model's ordinary forward fills the buffers' first columns
            logits = self.base.next_logits()
            return logits, logits.argmax(dim=-1) if greedy else None
        if self.key_mask is None:  # first step after prefill: the state tensors, from the host-side sequence
            length = self.ids.shape[1]
            self.key_mask = self.mask.new_zeros(self.batch, cache.max_len)
            self.key_mask[:, :length] = self.mask
            # left pads do not count; fresh (B, 1) copies with standard strides: a column view carries the
            # growing row stride and the compiled step's stride guard would recompile
            self.pos = position_ids(self.mask)[:, -1:].clone(memory_format=torch.contiguous_format)
            self.index = torch.tensor([length - 1], device=self.ids.device)
        memory, memory_mask = self.base.step_memory()
        cache.step_index = self.index
        try:
            logits, tokens, self.pos, self.index = self.step(self.model, self.newest, self.pos, self.index,
                                                             self.key_mask, cache, memory, memory_mask)
        finally:
            cache.step_index = None
        cache.advance()
        return logits, tokens if greedy else None

    def expand(self, n: int) -> None:
        self.base.expand(n)
        for name in ("key_mask", "pos", "newest"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.repeat_interleave(n, 0))

    def append(self, tokens: torch.Tensor) -> None:
        self.base.append(tokens)
        self.newest = tokens[:, None].clone(memory_format=torch.contiguous_format)  # (B, 1)

    def reorder(self, index: torch.Tensor) -> None:
        self.base.reorder(index)
        for name in ("key_mask", "pos", "newest"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.index_select(0, index))
