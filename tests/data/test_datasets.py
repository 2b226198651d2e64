from __future__ import annotations

import numpy as np
import pytest

from zoo.data.cache import RaggedIds
from zoo.data.datasets import (
    EpochKeySampler,
    LabelledDataset,
    LMBlocks,
    PairDataset,
    mask_tokens,
)
from zoo.tokenizers.specials import SpecialTokens
from zoo.utils import IGNORE_INDEX


def test_mask_tokens_80_10_10():
    rng = np.random.default_rng(0)
    ids = np.concatenate([[1], np.arange(5, 100_005) % 1000 + 5, [2]])
    inputs, labels = mask_tokens(ids, rng, prob=0.15, mask_id=4, vocab_size=1005, n_special=5)
    picked = labels != IGNORE_INDEX
    assert (
        labels[0] == labels[-1] == IGNORE_INDEX and inputs[0] == 1 and inputs[-1] == 2
    )  # specials untouched
    assert picked.mean() == pytest.approx(0.15, abs=0.01)
    assert (labels[picked] == ids[picked]).all()
    assert (inputs[~picked] == ids[~picked]).all()
    as_mask = (inputs[picked] == 4).mean()
    kept = (inputs[picked] == ids[picked]).mean()
    assert as_mask == pytest.approx(0.8, abs=0.02)
    assert kept == pytest.approx(0.1, abs=0.02)  # (random replacements rarely hit the same id)
    assert ((inputs[picked] >= 5) | (inputs[picked] == 4)).all()


def test_mask_tokens_always_masks_one():
    inputs, labels = mask_tokens(
        np.array([1, 7, 2]), np.random.default_rng(0), prob=1e-9, mask_id=4, vocab_size=10, n_special=5
    )
    assert labels.tolist() == [IGNORE_INDEX, 7, IGNORE_INDEX]


def test_lm_blocks_random_and_sequential():
    """Causal windows are 9 tokens for 8 positions: input_ids the first 8, targets the last 8."""
    stream = np.arange(100, dtype=np.uint16)
    train = LMBlocks(stream, 8, random=True, seed=0)
    a, b = train[3], LMBlocks(stream, 8, random=True, seed=0)[3]
    assert a["input_ids"].tolist() == b["input_ids"].tolist() and set(a) == {"input_ids", "targets"}
    start = a["input_ids"][0].item()
    assert a["input_ids"].tolist() == list(range(start, start + 8))
    assert a["targets"].tolist() == list(range(start + 1, start + 9))
    starts = {train[k]["input_ids"][0].item() for k in range(200)}
    assert len(starts) > 50 and max(starts) <= 91  # 92 offsets: the last window ends at token 99
    val = LMBlocks(stream, 8, random=False, seed=0)
    assert len(val) == 13 and val[2]["input_ids"].tolist() == list(range(16, 24))
    assert val[2]["targets"].tolist() == list(range(17, 25))
    assert [int(t) for k in range(len(val)) for t in val[k]["targets"]] == list(range(1, 100))  # each once
    short = LMBlocks(stream[:5], 8, random=True, seed=0)
    assert short[0]["input_ids"].tolist() == [0, 1, 2, 3] and short[0]["targets"].tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="causal LM needs at least 2"):
        LMBlocks(stream[:1], 8, random=True, seed=0)


@pytest.mark.parametrize(("n", "block"), [(2, 8), (9, 8), (10, 8), (17, 8), (100, 8), (100, 1), (101, 33)])
def test_validation_windows_make_every_token_after_the_first_a_target_once(n, block):
    """Tokens 1 .. n-1 of the stream are targets exactly once, in order, the tail in a short last window
    (99 tokens, windows of 8: 12 whole windows and one of 3: 3% of the targets were never scored before)."""
    stream = np.arange(n, dtype=np.uint16)
    val = LMBlocks(stream, block, random=False, seed=0)
    assert len(val) == -(-(n - 1) // block)
    targets = [val[k]["targets"] for k in range(len(val))]
    assert [int(t) for row in targets for t in row] == list(range(1, n))
    assert [val.target_span(k) for k in range(len(val))] == [(int(r[0]), int(r[-1]) + 1) for r in targets]
    last = val[len(val) - 1]
    assert last["input_ids"].tolist() == list(range((len(val) - 1) * block, n - 1))  # inputs precede targets


def test_mlm_blocks_stay_block_len():
    """MLM windows are not shifted: block_len tokens, masked in place."""
    stream = np.arange(5, 105, dtype=np.uint16)
    train = LMBlocks(stream, 8, random=True, seed=0, mask_prob=0.15, vocab_size=200)
    item = train[3]
    assert set(item) == {"input_ids", "labels"} and item["input_ids"].shape == item["labels"].shape == (8,)
    val = LMBlocks(stream, 8, random=False, seed=0, mask_prob=0.15, vocab_size=200)
    assert len(val) == 12


def test_epoch_sampler_gives_fresh_keys_each_epoch():
    sampler = EpochKeySampler(4)
    assert list(sampler) == [0, 1, 2, 3]
    sampler.set_epoch(2)
    assert list(sampler) == [8, 9, 10, 11] and len(sampler) == 4


def test_pair_dataset_shifts_and_truncates():
    src = RaggedIds.from_rows([[10, 11, 12]], np.dtype(np.uint16))
    tgt = RaggedIds.from_rows([[20, 21, 22, 23]], np.dtype(np.uint16))
    ex = PairDataset(src, tgt, max_len=4, specials=SpecialTokens.plain(bos=1, eos=2))[0]
    assert ex["input_ids"].tolist() == [10, 11, 12]
    assert ex["decoder_input_ids"].tolist() == [1, 20, 21, 22]
    assert ex["labels"].tolist() == [20, 21, 22, 2]


def test_labelled_dataset_prepends_bos():
    texts = RaggedIds.from_rows([[7, 8, 9]], np.dtype(np.uint16))
    ex = LabelledDataset(texts, np.array([1]), max_len=3, specials=SpecialTokens.plain(bos=1))[0]
    assert ex["input_ids"].tolist() == [1, 7, 8] and ex["labels"].item() == 1
