"""The running batch's KV state for continuous batching: one KV cache of B rows in which every row's tokens
sit right-aligned and contiguous (the left-padded layout `model.generate` uses), so one forward call with a
padding mask and per-row positions steps every request at once. Requests join after a prefill of their own
(a fresh cache, left-padded to the batch's width) and leave by row selection; the columns no row needs any
more are cut off whenever the membership changes, so the width stays the longest live row.

Only the model's public forward-with-cache API is used: `model(ids, attention_mask=, position_ids=, cache=,
logits_to_keep=1)`, `model.new_cache()`, `KVCache.reorder` and `LayerCache.append` (and `LayerCache.state`, a
recurrent mixer's fixed-size entries, which join row by row: they have no width to align)."""

from __future__ import annotations

import torch

from zoo.generation.prompts import pad_prompts, position_ids
from zoo.modules.cache import KVCache


class RunningBatch:
    """B rows of KV cache `cache`, a padding mask (B, L) (1 = real token, right-aligned) and each row's real
    length (B,). An empty batch holds no cache."""

    def __init__(self, model, pad_id: int) -> None:
        self.model, self.pad_id = model, pad_id
        self.device = next(model.parameters()).device
        self.cache: KVCache | None = None
        self.mask = torch.zeros(0, 0, dtype=torch.long, device=self.device)  # (B, L)
        self.lengths = torch.zeros(0, dtype=torch.long, device=self.device)  # (B,)

    @property
    def size(self) -> int:
        return self.mask.shape[0]

    def prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, KVCache, torch.Tensor]:
        """Run new prompts (left-padded together) through a fresh cache: (next-token logits (k, V) float32,
        their cache, their mask (k, T)). Rows with the same prompt (a request's `n` choices, a GRPO group)
        share one forward row, whose logits, cache and mask rows are then copied to each of them. The batch
        itself is untouched until `rebuild` takes them in."""
        unique = list(dict.fromkeys(map(tuple, prompts)))  # each distinct prompt once, in first-seen order
        ids, mask = pad_prompts([list(p) for p in unique], self.pad_id, side="left")  # (u, T)
        ids, mask = ids.to(self.device), mask.to(self.device)
        padded = not bool(mask.all())
        cache = self.model.new_cache()
        out = self.model(ids, attention_mask=mask if padded else None,
                         position_ids=position_ids(mask) if padded else None, cache=cache, logits_to_keep=1)
        logits = out.logits[:, -1].float()  # (u, V)
        if len(unique) < len(prompts):
            row = {prompt: i for i, prompt in enumerate(unique)}
            index = torch.tensor([row[tuple(p)] for p in prompts], dtype=torch.long, device=self.device)
            cache.reorder(index)  # (k, ...): every layer's K/V and recurrent state, a copy per row
            logits, mask = logits.index_select(0, index), mask.index_select(0, index)
        return logits, cache, mask

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (B,); next-token logits (B, V) float32."""
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.size, 1)], dim=1)  # (B, L + 1)
        padded = not bool(self.mask.all())
        pos = self.lengths[:, None] if padded else None  # (B, 1): each row's own next position
        out = self.model(tokens[:, None], attention_mask=self.mask if padded else None, position_ids=pos,
                         cache=self.cache, logits_to_keep=1)
        self.lengths = self.lengths + 1
        return out.logits[:, -1].float()

    def rebuild(self, keep: list[int], joining: tuple[KVCache, torch.Tensor] | None = None) -> None:
        """Keep rows `keep` (in that order), then append the rows of a prefilled `joining` (cache, mask), and
        cut the leading columns that no row uses: one copy of the cache per membership change."""
        parts: list[tuple[KVCache, torch.Tensor]] = []
        if keep and self.cache is not None:
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            self.cache.reorder(index)
            parts.append((self.cache, self.mask.index_select(0, index)))
        if joining is not None:
            parts.append(joining)
        if not parts:
            self.cache, self.mask, self.lengths = None, self.mask[:0, :0], self.lengths[:0]
            return
        self.cache, self.mask = self.merge(parts)
        self.lengths = self.mask.sum(-1)

    def merge(self, parts: list[tuple[KVCache, torch.Tensor]]) -> tuple[KVCache, torch.Tensor]:
        """The rows of several (cache, mask (b, S)) as one (cache, mask (B, width)), each row right-aligned
        and the width the longest row's (prefills of single rows become one joining batch this way)."""
        width = max(int(mask.sum(-1).max()) for _, mask in parts)  # the longest live row
        layers = [_layers(cache) for cache, _ in parts]
        cache = self.model.new_cache()
        for i, layer in enumerate(cache.layers):
            if layers[0][i] is not None:
                k = torch.cat([_right(kv[i][0], width) for kv in layers])  # (B, KV, width, D)
                v = torch.cat([_right(kv[i][1], width) for kv in layers])
                layer.append(k, v)
            rows = [part.layers[i].state for part, _ in parts]  # a recurrent mixer's entries: one per row
            layer.state = {name: torch.cat([held[name] for held in rows]) for name in rows[0]}
        cache.length = width
        mask = torch.cat([_right(mask[:, None, :, None], width)[:, 0, :, 0] for _, mask in parts])
        return cache, mask


def _layers(cache: KVCache) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
    """Every layer's written K/V (B, KV, S, D); None for a layer that keeps no K/V (a recurrent mixer's)."""
    return [(layer.k[:, :, : layer.length], layer.v[:, :, : layer.length]) if layer.k is not None else None
            for layer in cache.layers]


def _right(t: torch.Tensor, width: int) -> torch.Tensor:
    """(B, H, S, D) -> (B, H, width, D): the last `width` columns, zero columns in front when S < width (a
    zero key is masked; zeros keep the masked scores finite)."""
    s = t.shape[2]
    if s >= width:
        return t[:, :, s - width :]
    return torch.cat([t.new_zeros(t.shape[0], t.shape[1], width - s, t.shape[3]), t], dim=2)
