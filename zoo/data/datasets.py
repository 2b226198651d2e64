"""Torch datasets over cached token ids, plus the epoch-keyed sampler and MLM masking.

Randomness is keyed, not stateful: sample ``k`` of the training stream uses
``np.random.default_rng((seed, k))`` for its block offset (and MLM mask), and the sampler hands out
keys ``epoch * n .. epoch * n + n - 1``. Results therefore do not depend on worker count, and
resuming at an epoch reproduces it exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from zoo.data.batching import EpochSampler
from zoo.data.cache import RaggedIds
from zoo.tokenizers.specials import SpecialTokens
from zoo.utils import IGNORE_INDEX

Example = dict[str, torch.Tensor]


class EpochKeySampler(EpochSampler):
    """Yields ``num_samples`` fresh integer keys per epoch; Lightning calls ``set_epoch`` (and a resumed run
    ``resume``: zoo.data.batching.EpochSampler)."""

    def __init__(self, num_samples: int, stride: int | None = None) -> None:
        if num_samples < 1:
            raise ValueError(f"num_samples={num_samples} must be >= 1")
        if stride is not None and stride < num_samples:
            raise ValueError(f"stride={stride} must be >= num_samples={num_samples} "
                             "(epochs would share keys)")
        super().__init__(seed=0)  # the keys are the randomness: the dataset draws from (its seed, key)
        # epoch e starts at key e * stride: a stride that is a multiple of LMBlocks.parts puts the i-th key of
        # every epoch in part i % parts, so a rank keeps its parts from epoch to epoch
        self.num_samples, self.stride = num_samples, stride or num_samples

    def items(self) -> range:
        start = self.epoch * self.stride
        return range(start, start + self.num_samples)

    def __len__(self) -> int:
        return self.num_samples


def mask_tokens(
    ids: np.ndarray, rng: np.random.Generator, *, prob: float, mask_id: int, vocab_size: int,
    n_special: int = 5, special_ids: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """BERT masking: pick ``prob`` of non-special positions (at least one); of those 80% -> ``<mask>``,
    10% -> a random non-special token, 10% unchanged. Returns ``(inputs, labels)``; labels are
    ``IGNORE_INDEX`` except at picked positions. The specials are ``special_ids`` (the tokenizer's, any
    ids), or ``0 .. n_special - 1`` (zoo's fixed ids) when it is None."""
    ids = ids.astype(np.int64)
    labels = np.full_like(ids, IGNORE_INDEX)
    specials = (np.arange(n_special) if special_ids is None
                else np.unique(np.asarray(special_ids, dtype=np.int64)))
    candidates = np.flatnonzero(~np.isin(ids, specials))
    if len(candidates) == 0:
        return ids, labels
    picked = candidates[rng.random(len(candidates)) < prob]
    if len(picked) == 0:
        picked = candidates[rng.integers(len(candidates))][None]
    labels[picked] = ids[picked]
    inputs = ids.copy()
    roll = rng.random(len(picked))
    inputs[picked[roll < 0.8]] = mask_id
    randomised = picked[(roll >= 0.8) & (roll < 0.9)]
    drawn = rng.integers(0, vocab_size - len(specials), size=len(randomised))  # rank among non-special ids
    for special in specials:  # ascending: the rank-th id that is not special
        drawn += drawn >= special
    inputs[randomised] = drawn
    return inputs, labels


class LMBlocks(Dataset):
    """Contiguous windows of one token stream, ``block_len`` positions each. Causal LM (no ``mask_prob``): a
    window is ``block_len + 1`` tokens, ``input_ids`` its first ``block_len`` and ``targets`` its last (every
    position is trained); MLM: ``block_len`` tokens, masked in place.

    ``random=True`` (training): item ``k`` is a window at an offset drawn from ``(seed, k)`` (nanoGPT) inside
    part ``k % parts`` of the stream (contiguous equal ranges), so the rank given keys ``r, r + W, ...`` reads
    only its own parts. ``random=False`` (validation): item ``k`` starts at ``k * block_len``, every token
    after the first a causal target once (the last window as short as the tail needs: ``target_span``). A
    stream shorter than a window gives one shorter item (the collator pads it)."""

    def __init__(self, stream: np.ndarray, block_len: int, *, random: bool, seed: int,
                 mask_prob: float | None = None, mask_id: int = 4, vocab_size: int = 0,
                 special_ids: Sequence[int] | None = None, parts: int = 1) -> None:
        self.causal = mask_prob is None
        self.span = block_len + 1 if self.causal else block_len  # tokens read per window
        if len(stream) == 0:
            raise ValueError("token stream is empty")
        if self.causal and len(stream) < 2:
            raise ValueError("token stream has 1 token; causal LM needs at least 2 (an input and its target)")
        self.stream, self.block_len, self.random, self.seed = stream, block_len, random, seed
        self.mask = dict(prob=mask_prob, mask_id=mask_id, vocab_size=vocab_size, special_ids=special_ids)
        if not isinstance(parts, int) or parts < 1:
            raise ValueError(f"data.shards={parts!r} must be a positive int")
        # every part holds at least one whole window
        self.parts = max(1, min(parts, len(stream) // self.span))
        # part p: [bounds[p], bounds[p+1])
        self.bounds = np.linspace(0, len(stream), self.parts + 1).astype(np.int64)

    def part_range(self, part: int) -> tuple[int, int]:
        """Stream positions ``[lo, hi)`` of ``part``: where the training windows of keys ``part (mod parts)``
        lie."""
        return int(self.bounds[part]), int(self.bounds[part + 1])

    def __len__(self) -> int:
        """Training: whole windows per pass over the stream (a causal window's last token is a target only);
        causal validation: the windows that make every token after the first a target, a short one last."""
        targets = len(self.stream) - int(self.causal)
        if self.causal and not self.random:
            return -(-targets // self.block_len)
        return max(1, targets // self.block_len)

    def target_span(self, key: int) -> tuple[int, int]:
        """Stream positions ``[start, stop)`` of causal validation window ``key``'s targets, in order."""
        if not self.causal or self.random:
            raise ValueError("target_span is defined for causal validation windows "
                             "(random=False, no mask_prob)")
        start = key * self.block_len + 1
        return start, min(start + self.block_len, len(self.stream))

    def __getitem__(self, key: int) -> Example:
        rng = np.random.default_rng((self.seed, int(key)))
        if self.random:
            lo, hi = self.part_range(int(key) % self.parts)
            start = lo + int(rng.integers(max(1, hi - lo - self.span + 1)))
        else:
            if not 0 <= key < len(self):
                raise IndexError(key)
            start = key * self.block_len
        window = np.asarray(self.stream[start : start + self.span])
        if self.causal:
            ids = torch.from_numpy(window.astype(np.int64))
            return {"input_ids": ids[:-1], "targets": ids[1:].clone()}
        inputs, labels = mask_tokens(window, rng, **self.mask)
        return {"input_ids": torch.from_numpy(inputs), "labels": torch.from_numpy(labels)}


class PairDataset(Dataset):
    """Seq2seq examples framed by the tokenizer's ``specials`` (zoo: source ids, ``[bos] + target`` decoder
    inputs, ``target + [eos]`` labels; T5: ``source </s>``, ``<pad> target``, ``target </s>``)."""

    def __init__(self, src: RaggedIds, tgt: RaggedIds, *, max_len: int, specials: SpecialTokens) -> None:
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} sources but {len(tgt)} targets")
        self.src, self.tgt, self.max_len, self.specials = src, tgt, max_len, specials

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> Example:
        decoder_inputs, labels = self.specials.target(self.tgt[i], self.max_len)
        return {
            "input_ids": torch.from_numpy(self.specials.source(self.src[i], self.max_len)),
            "decoder_input_ids": torch.from_numpy(decoder_inputs),
            "labels": torch.from_numpy(labels),
        }


class LabelledDataset(Dataset):
    """Classification examples framed by the tokenizer's ``specials`` (zoo: ``[bos] + text``, ``<bos>``
    doubling as the CLS position; BERT: ``[CLS] text [SEP]``) and a label."""

    def __init__(self, texts: RaggedIds, labels: np.ndarray, *, max_len: int,
                 specials: SpecialTokens) -> None:
        self.texts, self.labels, self.max_len, self.specials = texts, labels, max_len, specials

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> Example:
        ids = self.specials.classification(self.texts[i], self.max_len)
        return {"input_ids": torch.from_numpy(ids), "labels": torch.tensor(int(self.labels[i]))}
