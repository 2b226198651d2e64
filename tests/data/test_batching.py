"""Epoch-keyed orders, token-budget batches (data.max_tokens), over-long examples (data.truncate) and packed
document windows (data.document_mask), checked against hand-worked examples and brute-force counts."""

import numpy as np
import pytest
import torch

from zoo.data.batching import (
    EpochShuffle,
    ShardedBatches,
    TokenBudgetBatches,
    count_overlong,
    padding_share,
    wanted_lengths,
)
from zoo.data.collate import PadCollator
from zoo.data.datamodules import ClassificationDataModule, LMDataModule, Seq2SeqDataModule
from zoo.data.packing import DocumentWindows, document_ids
from zoo.data.tagging import TokenClassificationDataModule
from zoo.utils import IGNORE_INDEX


def test_token_budget_cut_by_hand():
    """Sizes 3 1 2 2 5, budget 6: sorted 1 2 2 | 3 | 5 (a fourth member would cost 4 x 3 = 12)."""
    batches = TokenBudgetBatches(np.array([3, 1, 2, 2, 5]), 6, seed=0, shuffle=False)
    assert [sorted(b) for b in batches] == [[1, 2, 3], [0], [4]]
    assert len(batches) == 3


def test_token_budget_batches_cover_every_example_once_within_budget_every_epoch():
    rng = np.random.default_rng(0)
    sizes = rng.integers(3, 40, size=500)
    sampler = TokenBudgetBatches(sizes, 200, seed=7)
    seen = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)  # the same count every epoch: Lightning counts once
        assert all(len(b) * sizes[b].max() <= 200 for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(500))
        seen.append(batches)
    assert seen[0] != seen[1]  # a new order each epoch
    again = TokenBudgetBatches(sizes, 200, seed=7)
    again.set_epoch(1)
    assert list(again) == seen[1]  # a function of (seed, epoch) alone
    assert padding_share(seen[0], sizes) < 0.05  # length bucketing: neighbours in size share a batch


def test_token_budget_refuses_a_budget_below_the_longest_example():
    with pytest.raises(ValueError,
                       match=r"data.max_tokens=10 cannot hold 1 example\(s\) of the longest length 12"):
        TokenBudgetBatches(np.array([4, 12]), 10, seed=0)


def test_resume_skips_the_trained_part_of_its_epoch_only():
    sampler = EpochShuffle(10, seed=3)
    sampler.set_epoch(2)
    full = list(sampler)
    sampler.resume(2, 4)
    assert list(sampler) == full[4:] and len(sampler) == 10
    assert list(sampler) == full  # the next pass over the epoch is whole again
    sampler.resume(2, 4)
    sampler.set_epoch(3)
    assert len(list(sampler)) == 10  # another epoch: nothing skipped


def test_sharded_batches_split_each_global_batch():
    inner = TokenBudgetBatches(np.arange(1, 30), 60, seed=0, min_size=2)
    shares = [list(ShardedBatches(inner, rank, 2)) for rank in range(2)]
    for whole, a, b in zip(inner, *shares, strict=True):
        assert sorted(a + b) == sorted(whole) or (len(whole) == 1 and a == b == whole)


def test_orders_do_not_depend_on_the_worker_count(tmp_path):
    texts, labels = _labelled([3, 9, 4, 12, 6, 5, 7, 8, 2, 11, 10, 3] * 2)
    batches = []
    for workers in (0, 2):
        dm = ClassificationDataModule(_Tok(), {"train": (texts, labels), "val": (texts, labels)},
                                      label_names=["a"], batch_size=4, max_seq_len=32, seed=5,
                                      num_workers=workers, max_tokens=40)
        dm.setup("fit")
        batches.append([b["input_ids"].tolist() for b in dm.train_dataloader()])
    assert batches[0] == batches[1]


def test_overlong_examples_are_counted_or_refused_naming_the_example():
    wanted = {"source": np.array([5, 40, 9, 33]), "target": np.array([4, 4, 50, 4])}
    assert count_overlong("train", wanted, 32, truncate=True, origin="data.name=pairs data.path=p.tsv") == 3
    with pytest.raises(ValueError, match=r"data.name=pairs data.path=p.tsv: train example 1 is longer than "
                                         r"model.max_seq_len=32 \(source 40 tokens, target 4 tokens, framing "
                                         r"included\); "
                                         r"3 of 4 train examples are"):
        count_overlong("train", wanted, 32, truncate=False, origin="data.name=pairs data.path=p.tsv")
    assert wanted_lengths(np.array([7, 2, 9]), lambda i: 3).tolist() == [8, 3, 10]  # +1: one framing token


def test_seq2seq_datamodule_counts_cut_pairs_and_batches_within_budget():
    src, tgt = _ragged([3, 30, 5, 8, 2, 6]), _ragged([4, 2, 40, 6, 3, 5])
    dm = Seq2SeqDataModule(_Tok(), {"train": (src, tgt), "val": (src, tgt)}, batch_size=2, max_seq_len=16,
                           seed=0, max_tokens=40)
    assert dm.overlong == {"train": 2, "val": 2}  # the 30-token source, the 40-token target (+ <bos>/<eos>)
    for batch in dm.train_dataloader():
        rows = batch["input_ids"].shape[0]
        assert rows * max(batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1]) <= 40
    with pytest.raises(ValueError,
                       match=r"train example 1 is longer than model.max_seq_len=16 \(source 30 tokens"):
        Seq2SeqDataModule(_Tok(), {"train": (src, tgt)}, batch_size=2, max_seq_len=16, seed=0, truncate=False,
                          origin="data.name=pairs data.path=p.tsv")


def test_max_tokens_and_document_mask_are_refused_where_they_do_not_apply():
    stream = {"train": np.arange(5, 200) % 50, "val": np.arange(5, 100) % 50}
    with pytest.raises(ValueError, match="data.max_tokens applies to examples of varying length"):
        LMDataModule(_Tok(), stream, batch_size=2, max_seq_len=8, seed=0, max_tokens=64)
    texts, labels = _labelled([3, 4])
    with pytest.raises(ValueError, match="data.document_mask=true applies to LM/MLM windows"):
        ClassificationDataModule(_Tok(), {"train": (texts, labels)}, label_names=["a"], batch_size=2,
                                 max_seq_len=8, seed=0, document_mask=True)


def test_document_windows_by_hand():
    eos = 2
    assert document_ids(np.array([7, 8, eos, 9, eos, eos, 6]), eos).tolist() == [0, 0, 0, 1, 1, 2, 3]
    ids = torch.tensor([7, 8, eos, 9, 6])
    windows = DocumentWindows([{"input_ids": ids, "targets": torch.tensor([8, eos, 9, 6, 5])}], eos)
    (example,) = [windows[0]]
    assert example["document_ids"].tolist() == [0, 0, 0, 1, 1]
    assert example["targets"].tolist() == [8, eos, IGNORE_INDEX, 6, 5]  # <eos> does not predict the next doc


def test_lm_datamodule_with_document_mask_pads_documents_apart():
    eos = 2
    stream = np.array([7, 8, eos, 9, 6, 5, eos, 8, 8, eos] * 20)
    dm = LMDataModule(_Tok(), {"train": stream, "val": stream}, batch_size=3, max_seq_len=8, seed=0,
                      document_mask=True)
    batch = next(iter(dm.train_dataloader()))
    for row, ids in zip(batch["document_ids"], batch["input_ids"], strict=True):
        assert row.tolist() == document_ids(ids.numpy(), eos).tolist()
    padded = PadCollator(0)([{"input_ids": torch.tensor([5, eos, 6]),
                              "document_ids": torch.tensor([0, 0, 1])},
                             {"input_ids": torch.tensor([5, 6, 7, 8, 9]),
                              "document_ids": torch.zeros(5).long()}])
    assert padded["document_ids"].tolist() == [[0, 0, 1, 2, 2], [0, 0, 0, 0, 0]]  # pads: one more document


def test_document_mask_with_a_bert_framed_stream_ends_documents_at_sep():
    """A WordPiece tokenizer has no eos: its documents are `[CLS] doc [SEP]` and [SEP] closes each one."""
    from zoo.tokenizers.specials import SpecialTokens

    cls_, sep = 101, 102
    bert = type("Bert", (_Tok,), {"eos_id": None, "specials": SpecialTokens(
        ids={"pad": 0, "cls": cls_, "sep": sep, "mask": 103}, all_ids=(0, 101, 102, 103), prefix=(cls_,),
        suffix=(sep,))})()
    stream = np.array([cls_, 7, 8, sep, cls_, 9, sep, cls_, 6, 5, 5, sep] * 10)
    dm = LMDataModule(bert, {"train": stream, "val": stream}, batch_size=2, max_seq_len=8, seed=0,
                      document_mask=True)
    batch = next(iter(dm.train_dataloader()))
    for row, ids in zip(batch["document_ids"], batch["input_ids"], strict=True):
        assert row.tolist() == document_ids(ids.numpy(), sep).tolist()
        assert int(row[-1]) == int((ids[:-1] == sep).sum())  # one more document after each [SEP]


# ------------------------------------------------------------------------------------------------ helpers


class _Tok:
    """The tokenizer attributes the data modules read."""

    pad_id, bos_id, eos_id, mask_id, vocab_size = 0, 1, 2, 4, 50
    padding_id = 0
    special_ids = (0, 1, 2, 3, 4)

    @property
    def specials(self):
        from zoo.tokenizers.specials import SpecialTokens

        return SpecialTokens.plain(pad=0, bos=1, eos=2)


def _ragged(lengths):
    from zoo.data.cache import RaggedIds

    return RaggedIds.from_rows([[5 + (i + j) % 40 for j in range(n)] for i, n in enumerate(lengths)],
                               np.dtype("int32"))


def _labelled(lengths):
    return _ragged(lengths), np.zeros(len(lengths), dtype=np.int64)


@pytest.mark.parametrize("make, longest, over", [
    ("classification", 10, 2),  # texts framed with one special token: 4 10 5 9; 10 and 9 exceed 8
    ("seq2seq", 9, 1),  # sources as they are, targets 2 + <bos>: a pair costs max(source, target) = 3 9 4 8
    ("token_classification", 9, 1),  # tagged sentences as they are (zoo's tokenizers frame nothing): 3 9 4 8
])
def test_max_tokens_below_one_example_is_refused_when_batches_are_planned(make, longest, over):
    """Refused when the data module is built (train.py: before the model), not by the loader during fit."""
    lengths = [3, 9, 4, 8]
    with pytest.raises(ValueError,
                       match=rf"data.name=x: data.max_tokens=8 is smaller than one example: train example "
                             rf"1 is {longest} tokens as batched \(framing included, cut to "
                             rf"model.max_seq_len\), and {over} example\(s\) exceed it; .* "
                             rf"data.max_tokens must be at least {longest}"):
        if make == "classification":
            texts, labels = _labelled(lengths)
            ClassificationDataModule(_Tok(), {"train": (texts, labels)}, label_names=["a"], batch_size=2,
                                     max_seq_len=32, seed=0, max_tokens=8, origin="data.name=x")
        elif make == "token_classification":  # was: not checked (its data module
                                              # was a copy without the check)
            ids = _ragged(lengths)
            TokenClassificationDataModule(_Tok(), {"train": (ids, np.zeros(len(ids.ids), dtype=np.int64))},
                                          label_names=["O"], batch_size=2, max_seq_len=32, seed=0,
                                          max_tokens=8, origin="data.name=x")
        else:
            Seq2SeqDataModule(_Tok(), {"train": (_ragged(lengths), _ragged([2, 2, 2, 2]))}, batch_size=2,
                              max_seq_len=32, seed=0, max_tokens=8, origin="data.name=x")
    texts, labels = _labelled(lengths)
    dm = ClassificationDataModule(_Tok(), {"train": (texts, labels)}, label_names=["a"], batch_size=2,
                                  max_seq_len=8, seed=0,
                                  max_tokens=8)  # cut to max_seq_len=8: 4 8 5 8, each fits alone
    assert sorted(map(sorted, dm.train_dataloader().batch_sampler)) == [[0], [1], [2], [3]]  # 2 x 5 > 8
