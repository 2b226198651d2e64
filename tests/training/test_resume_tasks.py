"""Exact mid-epoch resume and process-count independence for the tasks whose epoch is a pass over a finite
data set (seq2seq, classification; LM with a data.blocks_per_epoch longer than an evaluation interval): a run
killed after a mid-epoch checkpoint and resumed logs the losses of the uninterrupted run (1e-6), with
batch_size batches and token-budget batches (data.max_tokens); two DDP processes (trainer=ddp_cpu) log the
losses of one process (1e-5) where the processes' label counts differ (seq2seq token budgets, MLM masks; LM:
tests/training/test_cli.py). LM windows: document masking trains."""

from __future__ import annotations

import json

import pytest

from zoo.data.batching import padding_share
from zoo.training.module import ZooLightningModule
from zoo.training.run import train

from .conftest import TINY_LM, killed_and_resumed, train_losses

pytestmark = pytest.mark.e2e  # trains, spawns processes or drives a browser: outside the inner loop

RUN = ["logger=csv", "trainer.accelerator=cpu", "trainer.limit_val_batches=1",
       "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1",
       "optim.lr=3e-3", "scheduler.warmup_steps=2", "tokenizer.vocab_size=300", "callbacks.samples=null",
       "callbacks.progress_bar=null"]
SEQ2SEQ = ["model=transformer_tiny", "model.encoder_layers=1", "model.decoder_layers=1", "model.d_model=32",
           "model.n_heads=2", "model.d_ff=64", "model.max_seq_len=32", "+data.n_pairs=300", "+data.n_test=10",
           "callbacks.exact_match=null", "batch_size=16", *RUN]

# masked counts differ per process
MLM = ["model=bert_small", "model.n_layers=1", "model.d_model=32", "model.n_heads=2", "model.d_ff=64",
       "model.max_seq_len=32", "data=stdlib_text", "data.max_bytes=120000", *RUN]


@pytest.fixture
def classification(tmp_path) -> list[str]:
    data = tmp_path / "labelled.jsonl"
    words = {"pos": "good great fine nice", "neg": "bad awful poor sad", "mix": "so so okay meh"}
    data.write_text("".join(json.dumps({"text": " ".join([words[y]] * (1 + i % 4)) + f" {i}", "label": y})
                            + "\n"
                            for i in range(80) for y in words), encoding="utf-8")
    return ["model=bert_small", "model.head=classifier", "model.n_layers=1", "model.d_model=32",
            "model.n_heads=2", "model.d_ff=64", "model.max_seq_len=32", "data=classification",
            f"data.path={data}", "batch_size=16", *RUN]


@pytest.mark.parametrize("order", [[], ["+data.max_tokens=200"]], ids=["batch_size", "max_tokens"])
def test_seq2seq_resumed_mid_epoch_matches_uninterrupted(make_cfg, monkeypatch, order):
    # ~18 batches an epoch: step 4 is mid-epoch
    common = [*SEQ2SEQ, *order, "trainer.max_steps=8", "eval_every=4"]
    straight, resumed = killed_and_resumed(make_cfg, monkeypatch, common, "seq2seq")
    assert sorted(resumed) == [4, 5, 6, 7]  # continued from the step-4 checkpoint, in the middle of epoch 0
    for step in resumed:
        assert resumed[step] == pytest.approx(straight[step], abs=1e-6)


def test_classification_resumed_mid_epoch_matches_uninterrupted(make_cfg, monkeypatch, classification):
    # 216 train examples: 14 batches an epoch
    common = [*classification, "trainer.max_steps=8", "eval_every=4"]
    straight, resumed = killed_and_resumed(make_cfg, monkeypatch, common, "classification")
    assert sorted(resumed) == [4, 5, 6, 7]
    for step in resumed:
        assert resumed[step] == pytest.approx(straight[step], abs=1e-6)


def test_lm_resumed_mid_epoch_matches_uninterrupted(make_cfg, monkeypatch):
    """LM epochs normally end at each validation; with data.blocks_per_epoch the step-4 checkpoint falls
    inside an epoch of 400 windows (50 batches), and the resumed run draws the same windows and dropout."""
    common = [*TINY_LM, "trainer.max_steps=8", "eval_every=4", "model.dropout=0.1",
              "data.blocks_per_epoch=400", "callbacks.samples=null"]
    straight, resumed = killed_and_resumed(make_cfg, monkeypatch, common, "lm")
    assert sorted(resumed) == [4, 5, 6, 7]
    for step in resumed:
        assert resumed[step] == pytest.approx(straight[step], abs=1e-6)


def test_resume_across_an_epoch_boundary(make_cfg, monkeypatch, classification):
    """Checkpoint in epoch 0 (step 10 of 14), killed in epoch 1: the resumed run finishes epoch 0 and draws
    epoch 1's order, as the uninterrupted run does."""
    common = [*classification, "trainer.max_steps=18", "eval_every=10"]

    def killed(self, outputs, batch, batch_idx):
        if self.global_step == 16:
            raise RuntimeError("simulated kill")

    straight = train_losses(train(make_cfg(common, run="straight")).output_dir)
    with monkeypatch.context() as m:
        m.setattr(ZooLightningModule, "on_train_batch_end", killed, raising=False)
        with pytest.raises(RuntimeError, match="simulated kill"):
            train(make_cfg(common, run="killed"))
    resumed = train_losses(train(make_cfg([*common, "ckpt_path=last"], run="resumed")).output_dir)
    assert sorted(resumed) == list(range(10, 18))
    for step in resumed:
        assert resumed[step] == pytest.approx(straight[step], abs=1e-6)


@pytest.mark.parametrize(("task", "per_process", "one_process"), [
    ("seq2seq", ["+data.max_tokens=100"], ["+data.max_tokens=200"]),
    ("classification", ["batch_size=8"], ["batch_size=16"]),
    ("mlm", ["batch_size=4"], ["batch_size=8"]),
], ids=["seq2seq-max_tokens", "classification", "mlm"])
def test_two_ddp_processes_match_one(tmp_path, run_cli, make_cfg, cache_dir, classification, task,
                                     per_process, one_process):
    """The same global batches (16 examples, or a 200-token budget split in two), the loss averaged over every
    counted label of the global batch: the processes' shares differ in tokens, the trajectory does not. No
    dropout: each process draws its own masks, so with dropout the runs agree in distribution only."""
    data = {"seq2seq": SEQ2SEQ, "classification": classification, "mlm": MLM}[task]
    base = [*data, "trainer.max_steps=3", "eval_every=3", "model.dropout=0.0"]
    single = train_losses(train(make_cfg([*base, *one_process, "trainer=cpu"], run="one")).output_dir)
    two = run_cli([*base, *per_process, "trainer=ddp_cpu", f"hydra.run.dir={tmp_path / 'two'}",
                   f"paths.cache_dir={cache_dir}"])
    assert two.returncode == 0, two.stderr[-3000:]
    ddp = train_losses(tmp_path / "two")
    assert sorted(single) == sorted(ddp) == [0, 1, 2]
    for step in single:
        assert ddp[step] == pytest.approx(single[step], abs=1e-5)


def test_lm_with_document_mask_trains_and_validates(make_cfg):
    result = train(make_cfg([*TINY_LM, "data.document_mask=true", "trainer.max_steps=4", "eval_every=2",
                             "callbacks.samples=null"]))
    losses = train_losses(result.output_dir)
    assert sorted(losses) == [0, 1, 2, 3] and losses[3] < losses[0]
    assert result.metrics["val/loss"] < 6.0  # below ln(300) + a margin: it learned something


def test_token_budget_pads_less_than_random_batches_on_the_translation_data(make_cfg):
    """The bench's padding claim (bench/bench_batching.py), at test size: bucketing halves the padding
    share."""
    from zoo.tasks import build_data
    from zoo.training.plan import prepare

    cfg = make_cfg([*SEQ2SEQ, "+data.max_tokens=256"])
    plan = prepare(cfg)
    _, dm = build_data(plan.data_cfg, plan.tokenizer_cfg, task="seq2seq", max_seq_len=32, batch_size=16,
                       cache_dir=cfg.paths.cache_dir, seed=0)
    sizes, _ = dm.example_sizes("train")
    budget = [b["input_ids"].shape[0] for b in dm.train_dataloader()]
    assert sum(budget) == len(sizes)
    bucketed = padding_share(list(dm.train_dataloader().batch_sampler), sizes)
    dm.max_tokens = None
    randomly = padding_share([list(b) for b in _chunks(list(dm.train_dataloader().sampler), 16)], sizes)
    assert bucketed < 0.5 * randomly


def _chunks(items, n):
    return [items[i:i + n] for i in range(0, len(items), n)]
