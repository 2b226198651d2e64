"""Data sharding for multi-process training, done by zoo instead of Lightning's sampler replacement so that
N processes see exactly the global batch one process would see (keys rank, rank + N, ...) and the data
module's epoch-keyed sampler still receives `set_epoch`."""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import DataLoader, Sampler


class ShardedSampler(Sampler[int]):
    """Every `world`-th item of `inner`, starting at `rank`. With `pad`, the list is cycled up to a multiple
    of `world` so every process runs the same number of steps (DDP needs that)."""

    def __init__(self, inner: Sampler, rank: int, world: int, *, pad: bool) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world size {world}")
        self.inner, self.rank, self.world, self.pad = inner, rank, world, pad

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)

    def _items(self) -> list[int]:
        items = list(self.inner)
        if self.pad and items and len(items) % self.world:
            items += items[: self.world - len(items) % self.world]
        return items

    def __iter__(self) -> Iterator[int]:
        return iter(self._items()[self.rank :: self.world])

    def __len__(self) -> int:
        n = len(self.inner)
        if self.pad:
            return -(-n // self.world)
        return len(range(self.rank, n, self.world))


def sharded(loader: DataLoader, rank: int, world: int, *, pad: bool) -> DataLoader:
    """The same loader reading only this process's shard."""
    if world == 1:
        return loader
    return DataLoader(
        loader.dataset, batch_size=loader.batch_size, sampler=ShardedSampler(loader.sampler, rank, world, pad=pad),
        collate_fn=loader.collate_fn, num_workers=loader.num_workers, pin_memory=loader.pin_memory,
        persistent_workers=loader.persistent_workers,
    )


def shard_datamodule(datamodule, trainer) -> None:
    """Wrap the data module's train/val loaders so each process reads its shard (rank read when called)."""
    for name, pad in (("train_dataloader", True), ("val_dataloader", False)):
        original = getattr(datamodule, name)

        def make(original=original, pad=pad) -> DataLoader:
            return sharded(original(), trainer.global_rank, trainer.world_size, pad=pad)

        setattr(datamodule, name, make)
