"""Steppers: one object per architecture that owns the growing sequences, their attention mask and the
KV cache, and answers "next-token logits for every row". Decoding loops (greedy, sampling, beam search)
only call `next_logits`, `append` and `reorder`, so they never see caches, positions or windows.

A positional scheme with a fixed reach (`max_positions`, e.g. learned positions stop at `max_seq_len`)
bounds the window: the prompt is cropped to its last `max_positions` columns, and once the sequence
outgrows that window the cache is dropped and the cropped window is re-run each step (nanoGPT). Schemes
that reach any length (sinusoidal, RoPE, ALiBi, none) keep the cache and continue, except that LongRoPE
(`stale_after`) re-runs the sequence once when it outgrows the original length and the factors change."""

from __future__ import annotations

import torch

from zoo.generation.prompts import position_ids
from zoo.modules.cache import KVCache
from zoo.modules.mask import AttentionMask, build_mask


class Stepper:
    """Shared state and cache bookkeeping; subclasses give `_forward` (ids, mask, positions, cache) ->
    logits."""

    check_every = 1  # decoding loops look at "all rows finished?" (a host sync) every this many tokens

    def __init__(self, model, ids: torch.Tensor, mask: torch.Tensor, use_cache: bool) -> None:
        self.model = model
        self.ids, self.mask = ids, mask  # (B, L) full sequences (prompt + generated), 1 = real token
        self.padded = not bool(mask.all())  # no pads: let attention take its fused causal path
        self.window = model.positions.max_positions  # None: unbounded
        self.cache: KVCache | None = model.new_cache() if use_cache else None
        self.cache_start = 0  # column of ids where the cache's first position sits

    @property
    def batch(self) -> int:
        return self.ids.shape[0]

    def expand(self, n: int) -> None:
        """Repeat every row n times (beams / several samples per prompt). After the first step the cache is
        expanded too, so a shared prompt is run once, not n times."""
        if self.cache is not None and self.cache.length > 0:
            self.cache.reorder(torch.arange(self.batch, device=self.ids.device).repeat_interleave(n))
        self.ids, self.mask = self.ids.repeat_interleave(n, 0), self.mask.repeat_interleave(n, 0)

    def next_logits(self) -> torch.Tensor:
        """Logits (B, V) float32 for the token after each row's current sequence."""
        length = self.ids.shape[1]
        if self.cache is not None and self.window is not None:
            if self.cache.length == 0:  # prefill: a long prompt starts at its last `window` columns
                self.cache_start = max(0, length - self.window)
            elif length - self.cache_start > self.window:  # outgrew learned positions: no cache from here
                self.cache = None
        stale = self.model.positions.stale_after
        if self.cache is not None and stale is not None and 0 < self.cache.length <= stale < length:
            self.cache = self.model.new_cache()  # LongRoPE's long factors from here: re-run the sequence once
        if self.cache is not None:
            done = self.cache.length
            ids = self.ids[:, self.cache_start + done :]  # (B, new)
            mask = self.mask[:, self.cache_start :] if self.padded else None  # (B, past + new)
            pos = position_ids(mask)[:, done:] if self.padded else None
        else:
            start = max(0, length - self.window) if self.window is not None else 0
            ids = self.ids[:, start:]
            mask = self.mask[:, start:] if self.padded else None
            pos = position_ids(mask) if self.padded else None
        return self._forward(ids, mask, pos, self.cache)[:, -1].float()

    def next_tokens(self, greedy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(next-token logits (B, V), the greedy tokens (B,) when `greedy`, else None). A stepper that can
        pick inside its step (the static one) overrides this."""
        logits = self.next_logits()
        return logits, logits.argmax(dim=-1) if greedy else None

    def _forward(self, ids, mask, pos, cache) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def step_memory(self) -> tuple[torch.Tensor | None, AttentionMask | None]:
        """What a one-token decode step cross-attends to: (memory (B, S, C), its mask), or (None, None)."""
        return None, None

    def append(self, tokens: torch.Tensor) -> None:
        """Add one token (B,) to every row; new tokens are real (mask 1)."""
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.batch, 1)], dim=1)

    def reorder(self, index: torch.Tensor) -> None:
        """Rows become rows `index` of the current state (beam search follows each survivor's parent). The
        index stays within each input's rows, so per-input state (encoder memory, cross K/V) is not copied."""
        self.ids, self.mask = self.ids.index_select(0, index), self.mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index, cross=False)


class DecoderStepper(Stepper):
    """Decoder-only LM: rows are left-padded prompts; positions come from the attention mask."""

    def _forward(self, ids, mask, pos, cache) -> torch.Tensor:
        return self.model(ids, attention_mask=mask, position_ids=pos, cache=cache, logits_to_keep=1).logits


class EncoderDecoderStepper(Stepper):
    """Encoder-decoder: the source is encoded once; rows are targets that begin with `config.start_id`.
    Cross-attention K/V land in the cache on the first step and are reused (and reordered with beams)."""

    def __init__(self, model, src: torch.Tensor, src_mask: torch.Tensor, use_cache: bool) -> None:
        self.src_mask = src_mask if not bool(src_mask.all()) else None  # (B, S), right-padded
        self.memory, _ = model.encode(src, self.src_mask)  # (B, S, C)
        start = torch.full((src.shape[0], 1), model.config.start_id, dtype=torch.long, device=src.device)
        super().__init__(model, start, torch.ones_like(start), use_cache)

    def expand(self, n: int) -> None:
        super().expand(n)
        self.memory = self.memory.repeat_interleave(n, 0)
        if self.src_mask is not None:
            self.src_mask = self.src_mask.repeat_interleave(n, 0)

    def step_memory(self) -> tuple[torch.Tensor, AttentionMask]:
        return self.memory, build_mask(self.src_mask, causal=False, q_len=1, k_len=self.memory.shape[1])

    def _forward(self, ids, mask, pos, cache) -> torch.Tensor:
        # beams of one source share the same memory rows, so reorder (within a source) never touches it
        return self.model.decode(
            ids, self.memory, self.src_mask, decoder_attention_mask=mask, position_ids=pos, cache=cache,
            logits_to_keep=1,
        )[0]
