"""Lightning DataModules, one per task, over a cache entry's token ids.

Batches follow Hugging Face names: ``input_ids``/``attention_mask``/``labels`` (B, T) with
``labels=-100`` where ignored; seq2seq adds ``decoder_input_ids``/``decoder_attention_mask``;
classification ``labels`` are (B,). Causal LM batches carry ``targets`` (B, T) instead of ``labels``: the
next token of each position, already shifted (so ``model(**batch)`` refuses them rather than shift twice).
Usable with ``Trainer.fit`` or by hand:
``dm.setup("fit"); next(iter(dm.train_dataloader()))``.

Orders are keyed by ``(seed, epoch)`` (zoo.data.batching) and the data module's state holds where in the
epoch a checkpoint was taken, so a run resumed mid-epoch continues with the batches it would have drawn.
``data.max_tokens`` (seq2seq, classification) batches similar lengths within a padded-token budget.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from zoo.data.batching import (
    EpochSampler,
    EpochShuffle,
    TokenBudgetBatches,
    check_budget,
    count_overlong,
    wanted_lengths,
)
from zoo.data.cache import RaggedIds
from zoo.data.collate import PadCollator
from zoo.data.datasets import EpochKeySampler, LabelledDataset, LMBlocks, PairDataset
from zoo.data.packing import DocumentWindows
from zoo.tokenizers.tokenizer import ZooTokenizer


class ZooDataModule(L.LightningDataModule):
    """Shared loader settings; subclasses fill ``self.datasets`` in ``setup``."""

    packs_documents = False  # its examples are windows of packed documents (data.document_mask applies)

    def __init__(
        self, tokenizer: ZooTokenizer, *, batch_size: int, max_seq_len: int, seed: int, num_workers: int = 0,
        max_tokens: int | None = None, truncate: bool = True, origin: str = "data",
        document_mask: bool = False,
    ) -> None:
        super().__init__()
        if document_mask and not self.packs_documents:
            raise ValueError(f"data.document_mask=true applies to LM/MLM windows of packed documents; "
                             f"{type(self).__name__} examples are not packed: leave data.document_mask=false")
        self.document_mask = bool(document_mask)
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValueError(f"data.max_tokens={max_tokens!r} must be a positive int or null")
        # origin: the data, for messages
        self.max_tokens, self.truncate, self.origin = max_tokens, truncate, origin
        self.overlong: dict[str, int] = {}  # split -> examples longer than max_seq_len (cut: data.truncate)
        self.resume_at: dict[str, int] | None = None  # {"epoch", "batches"} of a mid-epoch checkpoint
        for key, value in (("batch_size", batch_size), ("max_seq_len", max_seq_len)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{key}={value!r} must be a positive int")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"data.num_workers={num_workers!r} must be an int >= 0")
        self.tokenizer, self.batch_size, self.max_seq_len = tokenizer, batch_size, max_seq_len
        self.seed, self.num_workers = seed, num_workers
        self.datasets: dict[str, Dataset] = {}
        self.collate = PadCollator(tokenizer.padding_id)  # pad_id, else eos_id (GPT-2 has no pad)

    def _dataset(self, split: str) -> Dataset:
        """The split's dataset, set up on first use; a split the data lacks is a ValueError."""
        if split not in self.datasets:
            self.setup("fit" if split in ("train", "val") else "test")
        if split not in self.datasets:
            raise ValueError(f"this dataset has no {split!r} split; available: {sorted(self.datasets)}")
        return self.datasets[split]

    def _loader(self, split: str, *, sampler: Sampler | None = None, shuffle: bool = False,
                batch_sampler: Sampler | None = None) -> DataLoader:
        # its own generator even when nothing is shuffled: starting an iterator then draws its worker seed
        # from it, not from torch's global RNG (dropout), which a resumed run restores as of its checkpoint
        generator = torch.Generator().manual_seed(self.seed)
        order = dict(batch_sampler=batch_sampler) if batch_sampler is not None else dict(
            batch_size=self.batch_size, shuffle=shuffle, sampler=sampler)
        return DataLoader(self._dataset(split), **order, generator=generator, collate_fn=self.collate,
                          num_workers=self.num_workers, pin_memory=torch.cuda.is_available(),
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._ordered("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._ordered("val", shuffle=False)

    def example_sizes(self, split: str) -> tuple[np.ndarray, np.ndarray | None]:
        """(N,) batch-row cost of each example of `split` and (N,) tie order, or None: what data.max_tokens
        buckets by (data modules whose examples vary in length)."""
        raise ValueError(f"data.max_tokens applies to examples of varying length (seq2seq, classification); "
                         f"{type(self).__name__} windows are all model.max_seq_len tokens: use batch_size")

    def _world(self) -> int:
        """Processes reading different batches (a tensor-parallel group's ranks share theirs)."""
        if self.trainer is None:
            return 1
        shared = getattr(self.trainer.strategy, "data_parallel", None)
        return shared[1] if shared else self.trainer.world_size

    def _ordered(self, split: str, *, shuffle: bool) -> DataLoader:
        """A finite split's loader: epoch-keyed shuffle (training) or file order, in batch_size batches or
        (data.max_tokens) token-budget batches of the whole global batch (sharded by
        zoo.training.distributed)."""
        if self.max_tokens is None:
            sampler = self._resumed(EpochShuffle(len(self._dataset(split)), self.seed)) if shuffle else None
            return self._loader(split, sampler=sampler)
        sizes, ties = self.example_sizes(split)
        world = self._world()
        batches = TokenBudgetBatches(sizes, self.max_tokens * world, self.seed, ties=ties, shuffle=shuffle,
                                     min_size=world)
        return self._loader(split, batch_sampler=self._resumed(batches, per_batch=1) if shuffle else batches)

    def _measure(self) -> None:
        """Set up, then per split: framed lengths by side (`_wanted`), examples longer than max_seq_len
        (counted; data.truncate=false refuses them) and a data.max_tokens one example alone exceeds."""
        self.setup("fit")
        self.wanted = {split: self._wanted(split) for split in self.datasets}  # split -> side -> (N,) lengths
        self.overlong = {split: count_overlong(split, wanted, self.max_seq_len, truncate=self.truncate,
                                               origin=self.origin) for split, wanted in self.wanted.items()}
        check_budget(self.max_tokens, {split: self.example_sizes(split)[0] for split in self.datasets},
                     origin=self.origin)

    def _wanted(self, split: str) -> dict[str, np.ndarray]:
        """side -> (N,) framed lengths of the split's examples before any cut (for `_measure`)."""
        raise NotImplementedError

    def _resumed(self, sampler: EpochSampler, per_batch: int | None = None) -> EpochSampler:
        """`sampler`, told to start its checkpoint epoch after the batches already trained (`per_batch` items
        each; default: a global batch of samples)."""
        if self.resume_at is not None:
            per_batch = per_batch or self.batch_size * self._world()
            sampler.resume(self.resume_at["epoch"], self.resume_at["batches"] * per_batch)
        return sampler

    def state_dict(self) -> dict[str, Any]:
        """The seed, and during fit where in the epoch the checkpoint is taken: orders are keyed by (seed,
        epoch), so (epoch, batches done) is the whole data position."""
        state: dict[str, Any] = {"seed": self.seed}
        trainer = self.trainer
        if trainer is not None and trainer.state.fn == "fit":
            done = trainer.fit_loop.epoch_loop.batch_progress.current.completed
            state["position"] = {"epoch": trainer.current_epoch, "batches": int(done)}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.seed = int(state_dict.get("seed", self.seed))
        self.resume_at = state_dict.get("position")


# data.shards: LM/MLM training-stream parts; ranks of a 1/2/4/8-process run read disjoint ones
DEFAULT_SHARDS = 8


class LMDataModule(ZooDataModule):
    """Causal LM: random contiguous windows of the training stream (nanoGPT style); validation uses fixed
    windows whose inputs do not overlap. A window is ``max_seq_len + 1`` tokens: ``input_ids`` its first
    ``max_seq_len``, ``targets`` its last ``max_seq_len`` (already the next tokens: not for ``labels=``,
    which shifts; the lm task computes the loss). ``token_bytes``: split -> the UTF-8 bytes of source text
    each token of its stream spells (what bits per byte divides by; the cache keeps them for the scored
    splits)."""

    mask_prob: float | None = None
    packs_documents = True

    def __init__(self, tokenizer: ZooTokenizer, streams: dict[str, np.ndarray], *,
                 blocks_per_epoch: int | None = None, shards: int | None = None,
                 token_bytes: dict[str, np.ndarray] | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.token_bytes = dict(token_bytes or {})
        for split, counts in self.token_bytes.items():
            if len(counts) != len(streams[split]):
                raise ValueError(f"token_bytes[{split!r}] has {len(counts)} "
                                 f"counts for {len(streams[split])} tokens")
        if blocks_per_epoch is not None and (not isinstance(blocks_per_epoch, int) or blocks_per_epoch < 1):
            raise ValueError(f"data.blocks_per_epoch={blocks_per_epoch!r} must be a positive int or null")
        if shards is not None and (not isinstance(shards, int) or shards < 1):
            raise ValueError(f"data.shards={shards!r} must be a positive int or null (= {DEFAULT_SHARDS})")
        self.shards = DEFAULT_SHARDS if shards is None else shards
        self.train_parts = 1  # the training stream's parts (LMBlocks.parts), known after setup
        if self.max_tokens is not None:
            self.example_sizes("train")  # raises: windows are all max_seq_len tokens
        self.streams, self.blocks_per_epoch = streams, blocks_per_epoch

    def _blocks(self, split: str, random: bool) -> LMBlocks:
        tok = self.tokenizer
        return LMBlocks(self.streams[split], self.max_seq_len, random=random, seed=self.seed,
                        mask_prob=self.mask_prob, mask_id=tok.mask_id, vocab_size=tok.vocab_size,
                        special_ids=tok.special_ids, parts=self.shards if random else 1)

    def setup(self, stage: str | None = None) -> None:
        self.datasets = {"train": self._blocks("train", True), "val": self._blocks("val", False)}
        self.train_parts = self.datasets["train"].parts
        if self.document_mask:  # windows carry document_ids: attention and positions per packed document
            end = self.tokenizer.specials.document_ends()[1][-1]  # closes each document (eos; BERT's [SEP])
            self.datasets = {s: DocumentWindows(d, end) for s, d in self.datasets.items()}

    def state_dict(self) -> dict[str, Any]:
        """The base state and the epoch length: a resume with another one would draw other batches
        (zoo.training.resume.check_same_epochs refuses it)."""
        return {**super().state_dict(), "blocks_per_epoch": self.blocks_per_epoch}

    def train_dataloader(self) -> DataLoader:
        n = self.blocks_per_epoch or len(self._dataset("train"))  # default: one stream's worth of tokens
        # each epoch's keys start at a multiple of parts
        stride = -(-n // self.train_parts) * self.train_parts
        return self._loader("train", sampler=self._resumed(EpochKeySampler(n, stride=stride)))


class MLMDataModule(LMDataModule):
    """Masked LM over the same windows: 15% of tokens picked, 80/10/10 mask/random/keep."""

    def __init__(self, tokenizer: ZooTokenizer, streams: dict[str, np.ndarray], *, mask_prob: float = 0.15,
                 **kwargs: Any) -> None:
        if not 0.0 < mask_prob < 1.0:
            raise ValueError(f"data.mask_prob={mask_prob!r} must be in (0, 1)")
        super().__init__(tokenizer, streams, **kwargs)
        self.mask_prob = mask_prob


class Seq2SeqDataModule(ZooDataModule):
    """Encoder-decoder pairs with right-shifted decoder inputs; ``test_pairs`` keeps raw test strings."""

    def __init__(self, tokenizer: ZooTokenizer, pairs: dict[str, tuple[RaggedIds, RaggedIds]], *,
                 test_pairs: list[tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.pairs, self.test_pairs = pairs, test_pairs or []
        self._measure()

    def _wanted(self, split: str) -> dict[str, np.ndarray]:
        """source / target (decoder inputs) -> (N,) framed lengths before any cut."""
        src, tgt = self.pairs[split]
        dataset = self.datasets[split]
        return {"source": wanted_lengths(np.diff(src.offsets), lambda i: len(dataset[i]["input_ids"])),
                "target": wanted_lengths(np.diff(tgt.offsets),
                                         lambda i: len(dataset[i]["decoder_input_ids"]))}

    def example_sizes(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """A pair costs its longer side per batch row (as cut to max_seq_len); ties ordered by target
        length."""
        src, tgt = (np.minimum(self.wanted[split][side], self.max_seq_len) for side in ("source", "target"))
        return np.maximum(src, tgt), tgt

    def setup(self, stage: str | None = None) -> None:
        frame = dict(max_len=self.max_seq_len, specials=self.tokenizer.specials)
        self.datasets = {split: PairDataset(src, tgt, **frame)
                         for split, (src, tgt) in self.pairs.items() if len(src) > 0}

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")


class LabelledDataModule(ZooDataModule):
    """Tokenized examples with their labels (a class per text, or a tag per token): ``label_names[i]`` names
    label ``i`` (also saved with the tokenizer); ``dataset_class`` frames one split's (ids, labels). An
    example longer than max_seq_len is cut (counted; data.truncate=false refuses it)."""

    dataset_class: type[Dataset]  # (ids, labels, *, max_len, specials)

    def __init__(self, tokenizer: ZooTokenizer, examples: dict[str, tuple[RaggedIds, np.ndarray]], *,
                 label_names: list[str], **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.examples, self.label_names = examples, label_names
        self._measure()

    def _wanted(self, split: str) -> dict[str, np.ndarray]:
        dataset = self.datasets[split]
        return {"text": wanted_lengths(np.diff(self.examples[split][0].offsets),
                                       lambda i: len(dataset[i]["input_ids"]))}

    def example_sizes(self, split: str) -> tuple[np.ndarray, None]:
        return np.minimum(self.wanted[split]["text"], self.max_seq_len), None

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    def setup(self, stage: str | None = None) -> None:
        frame = dict(max_len=self.max_seq_len, specials=self.tokenizer.specials)
        self.datasets = {split: self.dataset_class(ids, labels, **frame)
                         for split, (ids, labels) in self.examples.items()}


class ClassificationDataModule(LabelledDataModule):
    """Labelled text; ``label_names[i]`` is the name of class ``i``."""

    dataset_class = LabelledDataset
