"""Epoch-keyed samplers: shuffled order, token-budget batches, and where a resumed run starts.

Every order here is a function of ``(seed, epoch)`` alone (``np.random.default_rng((seed, epoch))``), built in
the main process, so it does not depend on the worker count, and a run resumed at batch ``k`` of an epoch
(``resume``) continues with exactly the batches the uninterrupted run would have drawn next.

``TokenBudgetBatches`` (``data.max_tokens``) buckets examples by length, the way fairseq does: all examples
are sorted by length (equal lengths in a seeded random order, new each epoch) and cut greedily into batches
whose padded size, members x longest member, stays within the budget; the batches are then shuffled. The
sorted lengths are the same every epoch, so the batch count is too (Lightning counts an epoch once).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
from torch.utils.data import Sampler


class EpochSampler(Sampler):
    """Base of zoo's epoch-keyed samplers: Lightning calls ``set_epoch``; ``resume(epoch, skip)`` makes the
    next pass over ``epoch`` start after its first ``skip`` items (a mid-epoch checkpoint's position).
    ``len`` stays the whole epoch's: Lightning's batch count restarts from the checkpoint's."""

    def __init__(self, seed: int) -> None:
        self.seed, self.epoch = int(seed), 0
        self._resume: tuple[int, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def resume(self, epoch: int, skip: int) -> None:
        if skip < 0:
            raise ValueError(f"cannot skip {skip} items")
        self._resume = (int(epoch), int(skip))

    def rng(self, stream: int = 0) -> np.random.Generator:
        """The generator of this epoch (``stream`` tells apart independent draws of one epoch)."""
        return np.random.default_rng((self.seed, self.epoch, stream))

    def items(self) -> Sequence:
        """This epoch's items in order (indices, keys or batches)."""
        raise NotImplementedError

    def __iter__(self) -> Iterator:
        skip = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            skip, self._resume = self._resume[1], None
        return itertools.islice(iter(self.items()), skip, None)


class EpochShuffle(EpochSampler):
    """A permutation of ``range(n)`` per epoch."""

    def __init__(self, n: int, seed: int) -> None:
        super().__init__(seed)
        if n < 1:
            raise ValueError(f"n={n} must be >= 1")
        self.n = n

    def items(self) -> Sequence[int]:
        return self.rng().permutation(self.n).tolist()

    def __len__(self) -> int:
        return self.n


class TokenBudgetBatches(EpochSampler):
    """Batches of example indices (a batch sampler) of similar length, each within ``max_tokens`` padded
    tokens: ``len(batch) * max(sizes[batch]) <= max_tokens``. ``sizes`` (N,) is what an example costs per
    batch row (seq2seq: the longer of source and target); ``ties`` (N,), optional, orders examples of equal
    size (seq2seq: the target length, so both sides pad little). ``shuffle=False`` (validation): no random
    tie order, batches in length order. ``min_size`` members at least per batch (DDP: one per process)."""

    def __init__(self, sizes: np.ndarray, max_tokens: int, seed: int, *, ties: np.ndarray | None = None,
                 shuffle: bool = True, min_size: int = 1) -> None:
        super().__init__(seed)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        if len(self.sizes) == 0:
            raise ValueError("no examples to batch")
        longest = int(self.sizes.max())
        if longest * min_size > max_tokens:
            raise ValueError(f"data.max_tokens={max_tokens} cannot hold {min_size} example(s) of the longest "
                             f"length {longest} in one batch; raise data.max_tokens to at least "
                             f"{longest * min_size}")
        self.ties = np.zeros_like(self.sizes) if ties is None else np.asarray(ties, dtype=np.int64)
        self.max_tokens, self.shuffle, self.min_size = int(max_tokens), shuffle, min_size
        self._bounds = self._cut(np.sort(self.sizes))  # the same every epoch: sorted sizes do not change

    @property
    def sampler(self) -> EpochSampler:
        """Lightning calls ``set_epoch`` on ``batch_sampler.sampler``; this sampler keys its own order."""
        return self

    def _cut(self, sorted_sizes: np.ndarray) -> list[tuple[int, int]]:
        """Greedy [start, end) runs of the ascending sizes: grow a batch while members x longest fits."""
        bounds, start = [], 0
        for end in range(1, len(sorted_sizes) + 1):
            if (end - start) * int(sorted_sizes[end - 1]) > self.max_tokens:
                bounds.append((start, end - 1))
                start = end - 1
        bounds.append((start, len(sorted_sizes)))
        return bounds

    def items(self) -> list[list[int]]:
        random_order = (self.rng(0).permutation(len(self.sizes)) if self.shuffle
                        else np.arange(len(self.sizes)))
        order = random_order[np.lexsort((self.ties[random_order], self.sizes[random_order]))]  # by size, tie
        batches = [order[a:b].tolist() for a, b in self._bounds]
        if self.shuffle:
            batches = [batches[i] for i in self.rng(1).permutation(len(batches))]
        return batches

    def __len__(self) -> int:
        return len(self._bounds)


class ShardedBatches(Sampler[list[int]]):
    """Process ``rank``'s share of each batch of ``inner``: members ``rank, rank + world, ...`` (sorted by
    length, so every share pads alike). A batch with fewer members than processes lends one twice."""

    def __init__(self, inner: Sampler[list[int]], rank: int, world: int) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world size {world}")
        self.inner, self.rank, self.world = inner, rank, world

    @property
    def sampler(self):
        """What Lightning calls ``set_epoch`` on."""
        return getattr(self.inner, "sampler", self.inner)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.inner:
            yield batch[self.rank :: self.world] or [batch[self.rank % len(batch)]]

    def __len__(self) -> int:
        return len(self.inner)


def padding_share(batches: Sequence[Sequence[int]], sizes: np.ndarray) -> float:
    """Fraction of the padded tokens of ``batches`` that are padding: 1 - real / (rows x longest)."""
    lengths = [sizes[list(batch)] for batch in batches]
    real, padded = sum(int(n.sum()) for n in lengths), sum(len(n) * int(n.max()) for n in lengths)
    return 1.0 - real / padded if padded else 0.0


def wanted_lengths(raw: np.ndarray, framed_length: Callable[[int], int]) -> np.ndarray:
    """(N,) lengths the examples would have once framed (special tokens added) if nothing were cut: ``raw``
    plus the framing's overhead, measured with ``framed_length(i)`` on the shortest example (no cut reaches
    it)."""
    raw = np.asarray(raw, dtype=np.int64)
    shortest = int(np.argmin(raw))
    return raw + (framed_length(shortest) - int(raw[shortest]))


def check_budget(max_tokens: int | None, sizes: Mapping[str, np.ndarray], *, origin: str) -> None:
    """Refuse a ``data.max_tokens`` that one example alone exceeds (``sizes``: split -> (N,) batch-row cost of
    each example, as batched), when the batches are planned: a batch holds at least one example."""
    sizes = {split: np.asarray(s) for split, s in sizes.items() if len(s)}
    if max_tokens is None or not sizes:
        return
    split = max(sizes, key=lambda name: int(sizes[name].max()))
    i, longest = int(np.argmax(sizes[split])), int(sizes[split].max())
    if longest > max_tokens:
        count = sum(int((s > max_tokens).sum()) for s in sizes.values())
        raise ValueError(f"{origin}: data.max_tokens={max_tokens} is smaller than one example: {split} "
                         f"example {i} is {longest} tokens as batched "
                         f"(framing included, cut to model.max_seq_len), and {count} example(s) exceed it; a "
                         f"batch holds at least one example, so data.max_tokens must be at least {longest} "
                         "(the longest example), or null (batches of batch_size)")


def count_overlong(split: str, wanted: Mapping[str, np.ndarray], room: int, *, truncate: bool,
                   origin: str) -> int:
    """How many examples of ``split`` have a side (``wanted``: side name -> (N,) lengths) longer than ``room``
    tokens (model.max_seq_len); with ``truncate=False`` the first one is a ValueError naming it instead."""
    over = np.any([lengths > room for lengths in wanted.values()], axis=0)
    if over.any() and not truncate:
        i = int(np.flatnonzero(over)[0])
        sides = ", ".join(f"{side} {int(lengths[i])} tokens" for side, lengths in wanted.items())
        raise ValueError(f"{origin}: {split} example {i} is longer than model.max_seq_len={room} ({sides}, "
                         f"framing included); {int(over.sum())} of {len(over)} {split} examples are. Shorten "
                         "them, raise model.max_seq_len, or set data.truncate=true to cut them "
                         "(counted and reported).")
    return int(over.sum())
