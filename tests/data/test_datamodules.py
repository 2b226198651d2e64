from __future__ import annotations

import json

import lightning as L
import pytest
import torch

from zoo.tasks import build_data

from .conftest import SMALL_BPE, SMALL_STDLIB, SMALL_TOY

KW = dict(batch_size=4, seed=0)


def first_batch(dm, split="train"):
    dm.setup("fit")
    return next(iter(getattr(dm, f"{split}_dataloader")()))


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_lm_batches(shared_cache):
    tok, dm = build_data(SMALL_STDLIB, SMALL_BPE, task="lm", max_seq_len=32, cache_dir=shared_cache, **KW)
    batch = first_batch(dm)
    assert set(batch) == {"input_ids", "attention_mask", "targets"}
    assert (batch["input_ids"].shape == batch["targets"].shape == (4, 32)
            and batch["input_ids"].dtype == torch.long)
    # windows of 33: targets = next tokens
    assert torch.equal(batch["targets"][:, :-1], batch["input_ids"][:, 1:])
    assert batch["attention_mask"].all()
    assert batch["input_ids"].max() < tok.vocab_size
    text = tok.decode(batch["input_ids"][0])
    stream = tok.decode(dm.streams["train"])
    assert text in stream  # a contiguous window of the training stream
    val = first_batch(dm, "val")
    stream = torch.as_tensor(dm.streams["val"][:65].astype("int64"))
    assert torch.equal(val["input_ids"][0], stream[:32]) and torch.equal(val["targets"][0], stream[1:33])
    assert torch.equal(val["input_ids"][1], stream[32:64]) and torch.equal(val["targets"][1], stream[33:65])


def test_lm_is_deterministic_and_epochs_differ(shared_cache):
    def batches(epoch):
        _, dm = build_data(SMALL_STDLIB, SMALL_BPE, task="lm", max_seq_len=16, cache_dir=shared_cache, **KW)
        dm.setup("fit")
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(epoch)
        return next(iter(loader))["input_ids"]

    assert torch.equal(batches(0), batches(0))
    assert not torch.equal(batches(0), batches(1))


def test_lm_short_val_stream_is_padded(tmp_path, shared_cache):
    (tmp_path / "a.txt").write_text("a long enough training text. " * 40 + "\nshort\n")
    _, dm = build_data(
        {"name": "text", "files": str(tmp_path / "a.txt"), "val_fraction": 0.01},
        {"name": "char"},
        task="lm",
        max_seq_len=64,
        cache_dir=shared_cache,
        **KW,
    )
    batch = first_batch(dm, "val")
    n = len(dm.streams["val"])
    assert n < 64 and batch["input_ids"].shape == batch["targets"].shape == (1, n - 1)


def test_mlm_batches(shared_cache):
    tok, dm = build_data(
        SMALL_STDLIB, SMALL_BPE, task="mlm", max_seq_len=64, cache_dir=shared_cache, batch_size=16, seed=0
    )
    batch = first_batch(dm)
    labels, inputs = batch["labels"], batch["input_ids"]
    picked = labels != -100
    assert 0.05 < picked.float().mean() < 0.3
    assert (inputs[picked] == tok.mask_id).float().mean() > 0.5
    assert (labels[picked] >= 5).all()  # special tokens are never prediction targets
    assert inputs.shape == (16, 64)  # MLM windows are max_seq_len tokens (no shift)
    # each row is a window of the stream: unpicked positions keep its tokens, picked ones are its labels
    windows = torch.as_tensor(dm.streams["train"].astype("int64")).unfold(0, 64, 1)  # (N, 64)
    for row in range(len(inputs)):
        kept = ~picked[row]
        start = int((windows[:, kept] == inputs[row, kept]).all(1).nonzero()[0])
        assert torch.equal(labels[row, picked[row]], windows[start, picked[row]])


def test_seq2seq_batches_are_shifted_and_padded(shared_cache):
    tok, dm = build_data(
        SMALL_TOY, SMALL_BPE, task="seq2seq", max_seq_len=64, cache_dir=shared_cache, batch_size=8, seed=0
    )
    batch = first_batch(dm)
    assert set(batch) == {
        "input_ids",
        "attention_mask",
        "decoder_input_ids",
        "decoder_attention_mask",
        "labels",
    }
    dec, labels, dmask = batch["decoder_input_ids"], batch["labels"], batch["decoder_attention_mask"]
    assert dec.shape == labels.shape == dmask.shape
    assert (dec[:, 0] == tok.bos_id).all()
    lengths = dmask.sum(1)
    for row, n in enumerate(lengths.tolist()):
        assert torch.equal(dec[row, 1:n], labels[row, : n - 1])  # labels are decoder inputs shifted left
        assert labels[row, n - 1] == tok.eos_id
        assert (labels[row, n:] == -100).all() and (dec[row, n:] == tok.pad_id).all()
    enc_lengths = batch["attention_mask"].sum(1)
    assert (batch["input_ids"][batch["attention_mask"] == 0] == tok.pad_id).all()
    assert enc_lengths.min() < batch["input_ids"].shape[1] or enc_lengths.unique().numel() == 1
    src = tok.decode(batch["input_ids"][0])
    tgt = tok.decode(labels[0][labels[0] >= 0])
    assert (src, tgt) in {*dm_pairs(dm, "train")}


def dm_pairs(dm, split):
    src, tgt = dm.pairs[split]
    return [(dm.tokenizer.decode(src[i]), dm.tokenizer.decode(tgt[i])) for i in range(len(src))]


def test_seq2seq_test_split(shared_cache):
    tok, dm = build_data(SMALL_TOY, SMALL_BPE, task="seq2seq", max_seq_len=64, cache_dir=shared_cache, **KW)
    dm.setup("test")
    assert len(dm.test_pairs) == 50
    assert dm_pairs(dm, "test") == dm.test_pairs  # byte-level BPE is lossless
    batch = next(iter(dm.test_dataloader()))
    assert batch["input_ids"].shape[0] == 4


def test_classification_batches(tmp_path, shared_cache):
    path = tmp_path / "l.jsonl"
    rows = [
        {"text": ("good " if i % 2 else "bad ") * (1 + i % 5), "label": ["neg", "pos"][i % 2]}
        for i in range(40)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok, dm = build_data(
        {"name": "classification", "path": str(path)},
        SMALL_BPE,
        task="classification",
        max_seq_len=8,
        cache_dir=shared_cache,
        **KW,
    )
    batch = first_batch(dm)
    assert batch["labels"].shape == (4,) and batch["labels"].dtype == torch.long
    assert (batch["input_ids"][:, 0] == tok.bos_id).all()
    assert batch["input_ids"].shape[1] <= 8
    for ids, mask, y in zip(batch["input_ids"], batch["attention_mask"], batch["labels"], strict=True):
        word = dm.label_names[y].replace("pos", "good").replace("neg", "bad")
        assert tok.decode(ids[mask.bool()]).split()[0] == word


class TinyLM(L.LightningModule):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, 8)
        self.head = torch.nn.Linear(8, vocab_size)
        self.seen: dict[str, list[torch.Tensor]] = {"train": [], "val": []}

    def training_step(self, batch, _):
        self.seen["train" if self.training else "val"].append(batch["input_ids"].clone())
        logits = self.head(self.emb(batch["input_ids"]))  # (B, T, V)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten())

    def validation_step(self, batch, _):
        self.log("val_loss", self.training_step(batch, _))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_works_with_trainer_fit(shared_cache, tmp_path):
    tok, dm = build_data(SMALL_STDLIB, SMALL_BPE, task="lm", max_seq_len=16, cache_dir=shared_cache, **KW)
    trainer = L.Trainer(
        max_steps=3,
        limit_val_batches=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    model = TinyLM(tok.vocab_size)
    trainer.fit(model, datamodule=dm)
    # the reference: the datamodule's own loaders, read directly (same seed, so the same shuffled order)
    dm.setup("fit")
    train_ref = [b["input_ids"] for b, _ in zip(dm.train_dataloader(), range(3), strict=False)]
    val_ref = [b["input_ids"] for b, _ in zip(dm.val_dataloader(), range(2), strict=False)]
    assert len(model.seen["train"]) == 3 and all(map(torch.equal, model.seen["train"], train_ref))
    assert len(model.seen["val"]) == 2 and all(map(torch.equal, model.seen["val"], val_ref))


def test_batches_do_not_depend_on_worker_count(shared_cache):
    runs = []
    for workers in (0, 2):
        data = {**SMALL_STDLIB, "num_workers": workers, "blocks_per_epoch": 12}
        _, dm = build_data(data, SMALL_BPE, task="mlm", max_seq_len=16, cache_dir=shared_cache, **KW)
        dm.setup("fit")
        runs.append(torch.cat([b["input_ids"] for b in dm.train_dataloader()]))
    assert runs[0].shape == (12, 16) and torch.equal(runs[0], runs[1])
