"""In-process training runs on tiny seeded CPU models: learning, checkpoints + zoo.load, exact resume,
non-finite stop, MLM / seq2seq / classification metrics recounted from the final checkpoint, bf16-mixed and
torch.compile wiring."""

from __future__ import annotations

import json
import math

import pytest
import sacrebleu
import torch

import zoo
from zoo.apps import ConfigError
from zoo.checkpoint import CheckpointError, read_checkpoint
from zoo.tasks import build_data
from zoo.tasks.samples import translate
from zoo.training.callbacks import NonFiniteLossError
from zoo.training.module import ZooLightningModule
from zoo.training.plan import prepare
from zoo.training.run import train

from .conftest import TINY_LM, killed_and_resumed, read_csv_metrics


def _val_loss(model, datamodule, limit: int) -> float:
    """Token-weighted validation loss recomputed from scratch (the logged metric's reference)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for i, batch in enumerate(datamodule.val_dataloader()):
            if i == limit:
                break
            n = int((batch["targets"] != -100).sum())  # every position has a target (windows of T + 1)
            logits = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(),
                                                     ignore_index=-100)
            total += float(loss) * n
            count += n
    return total / count


def test_lm_learns_checkpoints_and_loads(make_cfg, tmp_path):
    cfg = make_cfg([*TINY_LM, "trainer.max_steps=40", "eval_every=20"])
    result = train(cfg)
    assert result.metrics["val/loss"] < math.log(300) - 1.0  # far below a uniform guess over the vocab
    assert "train/tokens_per_s" in result.metrics  # its value: tests/training/test_callbacks.py (fake clock)
    best, last = result.best_checkpoint, result.last_checkpoint
    assert best.name == "best.ckpt" and last.name == "last.ckpt"
    ckpt = torch.load(last, weights_only=True)  # plain data only
    assert ckpt["global_step"] == 40 and ckpt["zoo"]["model_config"]["vocab_size"] == 300
    assert (isinstance(ckpt["zoo"]["model_config"], dict)
            and "tokenizer.json" in ckpt["zoo"]["tokenizer_files"])
    assert not list(last.parent.glob("*.tmp"))  # atomic writes leave no temp files

    model, tok = zoo.load(last)
    assert tok.vocab_size == model.config.vocab_size == 300
    _, dm = build_data({**cfg.data, "blocks_per_epoch": 1}, cfg.tokenizer, task="lm", max_seq_len=32,
                       batch_size=8, cache_dir=cfg.paths.cache_dir, seed=0)
    assert _val_loss(model, dm, limit=2) == pytest.approx(result.metrics["val/loss"], abs=1e-5)

    exported = zoo.export(last, tmp_path / "export")
    assert {p.name for p in exported.iterdir()} == {"model.safetensors", "config.json", "tokenizer"}
    model2, tok2 = zoo.load(exported)
    ids = torch.tensor([tok.encode("def main():\n    return 1")])
    torch.testing.assert_close(model2(ids).logits, model(ids).logits, rtol=0, atol=0)
    assert tok2.encode("import os") == tok.encode("import os")

    (exported / "tokenizer" / "labels.json").write_text("[]")  # a stale file from an older export
    assert zoo.export(last, exported) == exported  # re-exporting replaces the folder as a whole
    assert not (exported / "tokenizer" / "labels.json").exists()
    assert not list(exported.parent.glob(".export.*"))  # no staging folder left behind
    foreign = tmp_path / "not_an_export"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="exists and is not a zoo export"):
        zoo.export(last, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"


@pytest.mark.e2e
def test_interrupted_then_resumed_run_matches_uninterrupted(make_cfg, monkeypatch):
    common = [*TINY_LM, "trainer.max_steps=8", "eval_every=4", "model.dropout=0.1"]
    straight, losses = killed_and_resumed(make_cfg, monkeypatch, common, "lm")
    assert sorted(losses) == [4, 5, 6, 7]  # continued from the step-4 checkpoint
    for step in (4, 5, 6, 7):
        assert losses[step] == pytest.approx(straight[step], abs=1e-6)


def test_non_finite_loss_stops_naming_the_step_and_keeps_last_checkpoint(make_cfg, monkeypatch):
    original = ZooLightningModule.training_step

    def poisoned(self, batch, batch_idx):
        loss = original(self, batch, batch_idx)
        return loss * float("nan") if self.global_step == 5 else loss

    monkeypatch.setattr(ZooLightningModule, "training_step", poisoned)
    cfg = make_cfg([*TINY_LM, "trainer.max_steps=8", "eval_every=2"])
    with pytest.raises(NonFiniteLossError, match="at step 5") as err:
        train(cfg)
    assert "last.ckpt" in str(err.value)
    last = read_checkpoint(f"{cfg.paths.output_dir}/checkpoints/last.ckpt")
    assert last["global_step"] == 4 and all(torch.isfinite(v).all() for v in last["state_dict"].values())


def test_resume_from_other_architecture_is_refused_before_training(make_cfg):
    first = train(make_cfg([*TINY_LM, "trainer.max_steps=2", "eval_every=2"], run="first"))
    before = first.last_checkpoint.read_bytes()
    with pytest.raises(ConfigError, match="model.n_heads: checkpoint 2, this run 4"):
        train(make_cfg([*TINY_LM, "model.n_heads=4", f"ckpt_path={first.last_checkpoint}"], run="second"))
    with pytest.raises(ConfigError, match="encoder model|decoder model"):
        train(make_cfg(["model=bert_small", f"ckpt_path={first.last_checkpoint}"], run="third"))
    assert first.last_checkpoint.read_bytes() == before
    with pytest.raises(CheckpointError, match="not a zoo training checkpoint"):
        torch.save({"state_dict": {}}, first.output_dir / "plain.pt")
        read_checkpoint(first.output_dir / "plain.pt")


TINY_NETS = ["model.d_model=32", "model.n_heads=2", "model.max_seq_len=32", "logger=csv", "batch_size=16",
             "trainer.max_steps=6", "eval_every=3", "trainer.limit_val_batches=2",
             "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false", "optim.lr=3e-3",
             "scheduler.warmup_steps=2"]


def test_mlm_without_naming_data(make_cfg):
    cfg = make_cfg(["model=bert_small", "model.n_layers=1", "model.d_ff=64", *TINY_NETS,
                    "+data.max_bytes=120000", "tokenizer.vocab_size=300", "callbacks.samples.num_shown=2"])
    result = train(cfg)
    assert result.metrics["val/loss"] < math.log(300)
    assert len(result.samples.samples) == 2
    # the samples' accuracy: the final model's top guesses at the masked positions of the first 2 windows
    model, _ = zoo.load(result.last_checkpoint)
    _, dm = build_data(prepare(cfg).data_cfg, cfg.tokenizer, task="mlm", max_seq_len=32, batch_size=16,
                       cache_dir=cfg.paths.cache_dir, seed=0)
    batch = next(iter(dm.val_dataloader()))
    with torch.no_grad():
        guesses = model.eval()(batch["input_ids"][:2],
                               attention_mask=batch["attention_mask"][:2]).logits.argmax(-1)
    picked = batch["labels"][:2] != -100
    right, total = int((guesses[picked] == batch["labels"][:2][picked]).sum()), int(picked.sum())
    assert total > 0 and result.metrics["sample/masked_token_accuracy"] == pytest.approx(right / total)


@pytest.mark.e2e
def test_translation_without_naming_data_reports_exact_match(make_cfg):
    cfg = make_cfg(["model=transformer_tiny", "model.encoder_layers=1", "model.decoder_layers=1",
                    "model.d_ff=64", *TINY_NETS, "+data.n_pairs=400", "+data.n_test=20",
                    "tokenizer.vocab_size=300", "callbacks.exact_match.max_examples=10",
                    "label_smoothing=0.1"])
    result = train(cfg)
    assert result.samples.samples[0].reference  # references shown next to translations
    assert result.metrics["val/loss"] < math.log(300)
    # the exact matches, recounted: greedy translations equal to their references, by the final model (the
    # last validation's and the samples') and by best.ckpt (the test split at the end, with BLEU / chrF)
    _, dm = build_data(prepare(cfg).data_cfg, cfg.tokenizer, task="seq2seq", max_seq_len=32, batch_size=16,
                       cache_dir=cfg.paths.cache_dir, seed=0)
    dm.setup("fit")
    val = dm.datasets["val"]
    tok = dm.tokenizer
    val_pairs = [(tok.decode(val.src[i]), tok.decode(val.tgt[i])) for i in range(10)]
    for metric, pairs, ckpt in (("val/exact_match", val_pairs, result.last_checkpoint),
                                ("sample/exact_match", dm.test_pairs, result.last_checkpoint),
                                ("test/exact_match", dm.test_pairs, result.best_checkpoint)):
        model, tok = zoo.load(ckpt)
        hyps = translate(model.eval(), tok, [s for s, _ in pairs], max_new_tokens=32)
        right = sum(h.split() == r.split() for h, (_, r) in zip(hyps, pairs, strict=True))
        assert result.metrics[metric] == pytest.approx(right / len(pairs)), metric
    refs = [r for _, r in dm.test_pairs]
    assert result.metrics["test/bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert result.metrics["test/chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)


@pytest.mark.e2e
def test_classification_takes_num_labels_from_the_data(make_cfg, tmp_path):
    data = tmp_path / "labelled.jsonl"
    words = {"pos": "good great fine", "neg": "bad awful poor", "mix": "so so okay"}
    data.write_text("".join(json.dumps({"text": f"{words[y]} {i}", "label": y}) + "\n"
                            for i in range(60) for y in words), encoding="utf-8")
    common = ["model=bert_small", "model.head=classifier", "model.n_layers=1", "model.d_ff=64", *TINY_NETS,
              "data=classification", f"data.path={data}", "tokenizer.vocab_size=300", "trainer.max_steps=2",
              "eval_every=2"]
    result = train(make_cfg(common))
    model, tok = zoo.load(result.last_checkpoint)
    assert model.config.head.num_labels == 3 and sorted(tok.label_names) == ["mix", "neg", "pos"]
    _, dm = build_data(prepare(make_cfg(common)).data_cfg, {"name": "bpe", "vocab_size": 300},
                       task="classification", max_seq_len=32, batch_size=16,
                       cache_dir=make_cfg(common).paths.cache_dir, seed=0)
    right = total = 0
    with torch.no_grad():  # val/accuracy over the 2 validation batches, recounted with the final model
        for batch in list(dm.val_dataloader())[:2]:
            guesses = model.eval()(batch["input_ids"],
                                   attention_mask=batch["attention_mask"]).logits.argmax(-1)
            right, total = right + int((guesses == batch["labels"]).sum()), total + len(batch["labels"])
    assert result.metrics["val/accuracy"] == pytest.approx(right / total)
    with pytest.raises(ConfigError, match="model.head.num_labels=2 but the data has 3 labels"):
        train(make_cfg([*common, "model.head.num_labels=2"], run="mismatch"))


@pytest.mark.e2e
def test_bf16_mixed_on_cpu_and_compile_switch_match_fp32(make_cfg):
    base = [*TINY_LM, "trainer.max_steps=2", "eval_every=2", "callbacks.samples=null"]
    fp32 = train(make_cfg(base, run="fp32")).metrics["val/loss"]
    bf16 = train(make_cfg([*base, "trainer.precision=bf16-mixed"], run="bf16")).metrics["val/loss"]
    compiled = train(make_cfg([*base, "compile.enabled=true", "compile.backend=eager"], run="compiled"))
    assert math.isfinite(bf16) and bf16 == pytest.approx(fp32, abs=0.05)
    assert compiled.metrics["val/loss"] == pytest.approx(fp32, abs=1e-5)
    assert "train/grad_norm" in read_csv_metrics(compiled.output_dir)[0] and "train/lr" in compiled.metrics


def test_attention_maps_callback_is_opt_in(make_cfg):
    assert make_cfg([]).callbacks.attention_maps is None
    result = train(make_cfg([*TINY_LM, "trainer.max_steps=2", "eval_every=2", "callbacks.samples=null",
                             "callbacks=with_attention_maps"]))
    pngs = list(result.output_dir.rglob("*.png"))
    assert pngs, f"no attention map images under {result.output_dir}"
