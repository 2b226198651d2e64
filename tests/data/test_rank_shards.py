"""Rank-aware reading of the LM training stream: with W processes, rank r's windows lie only in parts
r, r + W, ... of the stream (disjoint from every other rank's), the ranks together cover every part, and the
union of their windows is exactly the one-process epoch."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.data.datasets import EpochKeySampler, LMBlocks
from zoo.training.distributed import ShardedSampler, check_parts

STREAM = np.arange(10_000, dtype=np.uint16)  # token value = its position: a window tells where it was read


def windows_read(blocks: LMBlocks, sampler) -> list[tuple[int, int]]:
    """(first, last) stream position of each window the sampler's keys read."""
    spans = []
    for key in sampler:
        item = blocks[key]
        ids = np.concatenate([item["input_ids"].numpy(), item["targets"].numpy()[-1:]])
        assert (np.diff(ids) == 1).all()  # one contiguous window
        spans.append((int(ids[0]), int(ids[-1])))
    return spans


def part_of(blocks: LMBlocks, first: int, last: int) -> int:
    (parts,
     ) = {p for p in range(blocks.parts)
          if blocks.part_range(p)[0] <= first and last < blocks.part_range(p)[1]}
    return parts


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("epoch", [0, 1, 3])
def test_ranks_read_disjoint_parts_that_cover_the_stream(world, epoch):
    blocks = LMBlocks(STREAM, 32, random=True, seed=0, parts=8)
    n = 101  # not a multiple of the part count nor of the world size
    single = EpochKeySampler(n, stride=-(-n // 8) * 8)
    single.set_epoch(epoch)
    read = {}
    for rank in range(world):
        sampler = ShardedSampler(EpochKeySampler(n, stride=-(-n // 8) * 8), rank, world, pad=True)
        sampler.set_epoch(epoch)
        read[rank] = windows_read(blocks, sampler)
        assert len(read[rank]) == len(sampler) == -(-n // world)  # padded: every rank runs as many steps
    parts = {rank: {part_of(blocks, a, b) for a, b in spans} for rank, spans in read.items()}
    for rank in range(world):
        assert parts[rank] == set(range(rank, 8, world))  # its own parts, all of them, nothing else
    assert set().union(*parts.values()) == set(range(8))
    # the ranks' windows together are the one-process epoch's (plus the padding's repeats of a rank's own)
    assert set().union(*map(set, read.values())) == set(windows_read(blocks, single))


def test_parts_cover_the_stream_and_one_part_is_the_old_sampling():
    blocks = LMBlocks(STREAM, 32, random=True, seed=0, parts=8)
    bounds = [blocks.part_range(p) for p in range(8)]
    assert bounds[0][0] == 0 and bounds[-1][1] == len(STREAM)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    whole = LMBlocks(STREAM, 32, random=True, seed=0, parts=1)
    # parts=1: offset = rng((seed, key)).integers(len - span + 1), as before parts existed
    for key in range(20):
        start = int(np.random.default_rng((0, key)).integers(len(STREAM) - 33 + 1))
        assert int(whole[key]["input_ids"][0]) == start


def test_a_short_stream_has_fewer_parts_and_a_world_that_does_not_divide_them_is_an_error():
    assert LMBlocks(STREAM[:100], 32, random=True, seed=0, parts=8).parts == 3  # 100 // 33 whole windows
    check_parts(8, 2)
    check_parts(8, 8)
    check_parts(None, 3)
    with pytest.raises(ValueError,
                       match=r"data.shards: .* cut into 8 part\(s\), which 3 processes cannot share"):
        check_parts(8, 3)
