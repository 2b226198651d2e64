"""Data sharding for multi-process training, done by zoo instead of Lightning's sampler replacement so that
N processes see exactly the global batch one process would see (keys rank, rank + N, ...) and the data
module's epoch-keyed sampler still receives `set_epoch`."""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import DataLoader, Sampler

from zoo.data.batching import ShardedBatches


class ShardedSampler(Sampler[int]):
    """Every `world`-th item of `inner`, starting at `rank`. With `pad`, a process short of an item repeats
    its own first one, so every process runs the same number of steps (DDP needs that) and none reads an item
    (for LM windows: a part of the token stream) that belongs to another rank."""

    def __init__(self, inner: Sampler, rank: int, world: int, *, pad: bool) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world size {world}")
        self.inner, self.rank, self.world, self.pad = inner, rank, world, pad

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        items = list(self.inner)
        mine = items[self.rank :: self.world]
        if self.pad and items and len(mine) < -(-len(items) // self.world):
            mine.append(mine[0] if mine else items[0])
        return iter(mine)

    def __len__(self) -> int:
        n = len(self.inner)
        return -(-n // self.world) if self.pad else len(range(self.rank, n, self.world))


def sharded(loader: DataLoader, rank: int, world: int, *, pad: bool) -> DataLoader:
    """The same loader reading only this process's shard."""
    if world == 1:
        return loader
    # token-budget batches (data.max_tokens) of the global batch: share each one
    if loader.batch_size is None:
        order = dict(batch_sampler=ShardedBatches(loader.batch_sampler, rank, world))
    else:
        order = dict(batch_size=loader.batch_size,
                     sampler=ShardedSampler(loader.sampler, rank, world, pad=pad))
    return DataLoader(
        loader.dataset, **order,
        collate_fn=loader.collate_fn, num_workers=loader.num_workers, pin_memory=loader.pin_memory,
        persistent_workers=loader.persistent_workers,
    )


def check_parts(parts: int | None, world: int) -> None:
    """A token stream cut into `parts` (LM/MLM, data.shards) is read rank-disjointly only if `world` divides
    it (rank r reads parts r, r + world, ...); raise ValueError naming data.shards otherwise."""
    if parts is None or world == 1 or parts % world == 0:
        return
    raise ValueError(f"data.shards: the training token stream is cut into {parts} part(s), which {world} "
                     "processes cannot share without reading each other's; set data.shards to a multiple of "
                     f"{world} "
                     "(a stream shorter than that many windows of max_seq_len + 1 tokens has fewer parts)")


def data_parallel(trainer) -> tuple[int, int]:
    """(rank, count) of this process among those reading different batches: every process, except that the
    ranks of one tensor-parallel group (trainer.strategy=fsdp_tp) read the same batch."""
    return getattr(trainer.strategy, "data_parallel", None) or (trainer.global_rank, trainer.world_size)


def data_parallel_world(trainer) -> int:
    """How many processes read different batches (`data_parallel`'s count): what token counters multiply
    one process's tokens by."""
    shared = getattr(getattr(trainer, "strategy", None), "data_parallel", None)
    return shared[1] if shared else trainer.world_size


def shard_datamodule(datamodule, trainer) -> None:
    """Wrap the data module's train/val loaders so each process reads its shard (rank read when called)."""
    for name, pad in (("train_dataloader", True), ("val_dataloader", False)):
        original = getattr(datamodule, name)

        def make(original=original, pad=pad) -> DataLoader:
            loader = original()
            rank, world = data_parallel(trainer)
            check_parts(getattr(datamodule, "train_parts", None), world)
            return sharded(loader, rank, world, pad=pad)

        setattr(datamodule, name, make)
