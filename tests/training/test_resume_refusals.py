"""Resumes that would silently do something else are refused before any work, with the way to do what was
meant: another eval_every (an LM epoch is one evaluation period, and batches are keyed by epoch), a finished
run (nothing would train), and ckpt_path=last skips earlier runs of another model (it resumes the newest run
of this run's architecture and task; with none, it names what it found)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from zoo.apps import ConfigError
from zoo.hydra_schema import part_overrides
from zoo.training.run import train

from .conftest import CONF, TINY_LM, train_losses

MLM = ["model=bert_small", "model.n_layers=1", "model.d_model=32", "model.n_heads=2", "model.d_ff=64",
       *[o for o in TINY_LM if not o.startswith("model=")]]
SEQ2SEQ = ["model=transformer_tiny", "model.encoder_layers=1", "model.decoder_layers=1", "model.d_model=32",
           "model.n_heads=2", "model.d_ff=64", "model.max_seq_len=32", "logger=csv",
           "trainer.accelerator=cpu", "trainer.max_steps=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir):
    """make(overrides, run) composing into one runs folder, and two finished 2-step runs in it: a decoder LM
    (`lm`) and, newer, an encoder MLM (`mlm`)."""
    root = tmp_path_factory.mktemp("resume_refusals")

    def make(overrides: list[str], run: str):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose("config", overrides=[
                *part_overrides(overrides), f"paths.output_dir={root / 'runs' / run}",
                f"paths.runs_dir={root / 'runs'}",
                f"paths.cache_dir={cache_dir}"])

    lm = train(make([*TINY_LM, "trainer.max_steps=2", "eval_every=2"], "lm"))
    mlm = train(make([*MLM, "trainer.max_steps=2", "eval_every=2"], "mlm"))
    return make, root / "runs", lm, mlm


def test_resume_with_another_eval_every_is_refused_by_name(runs):
    make, runs_dir, lm, _ = runs
    cfg = make([*TINY_LM, "trainer.max_steps=4", "eval_every=3", f"ckpt_path={lm.last_checkpoint}"], "other")
    with pytest.raises(ConfigError) as err:
        train(cfg)
    assert str(err.value) == (
        f"ckpt_path={lm.last_checkpoint}: eval_every=3 makes an epoch of 24 training windows (eval_every x "
        "batch_size x trainer.accumulate_grad_batches x processes = 3 x 8 x 1 x 1), the checkpoint's run "
        "drew 16 per epoch (eval_every=2 at this batch size): an LM epoch is one evaluation period and its "
        "batches are keyed by epoch, so the resumed run would train on other batches than the run it "
        f"continues. Resume with eval_every=2, or start a new run from its weights with "
        f"init_from={lm.last_checkpoint}")
    assert not (runs_dir / "other").exists()


def test_resuming_a_finished_run_says_it_is_finished_and_how_to_continue(runs):
    make, runs_dir, lm, _ = runs
    cfg = make([*TINY_LM, "trainer.max_steps=2", "eval_every=2", f"ckpt_path={lm.last_checkpoint}"], "again")
    with pytest.raises(ConfigError) as err:
        train(cfg)
    assert str(err.value) == (
        f"ckpt_path={lm.last_checkpoint}: the run of checkpoint {lm.last_checkpoint} is finished: it is at "
        "step 2 and trainer.max_steps=2, so nothing would train. To train on, resume with a larger "
        "trainer.max_steps (e.g. trainer.max_steps=4)")
    assert not (runs_dir / "again").exists()


def test_ckpt_path_last_resumes_the_newest_run_of_this_model_and_task(runs):
    make, runs_dir, lm, mlm = runs
    assert mlm.last_checkpoint.stat().st_mtime > lm.last_checkpoint.stat().st_mtime  # the newest is the MLM's
    resumed = train(make([*TINY_LM, "trainer.max_steps=4", "eval_every=2", "ckpt_path=last"], "lm_resumed"))
    assert sorted(train_losses(resumed.output_dir)) == [2, 3]  # went on from the LM run's step 2


def test_ckpt_path_last_without_a_run_of_this_model_names_what_it_found(runs):
    make, runs_dir, lm, mlm = runs
    with pytest.raises(ConfigError) as err:
        train(make([*SEQ2SEQ, "ckpt_path=last"], "seq2seq"))
    message = str(err.value)
    assert message.startswith(f"ckpt_path=last: no earlier run under {runs_dir} holds an encoder_decoder "
                              "model trained on task seq2seq; it found: ")
    assert f"{mlm.last_checkpoint} (an encoder model, task mlm)" in message
    assert f"{lm.last_checkpoint} (a decoder model, task lm)" in message
    assert message.endswith("; name a checkpoint with ckpt_path=<file>")
    assert not (runs_dir / "seq2seq").exists()


def test_a_named_checkpoint_of_another_model_is_refused_with_the_right_article(runs):
    make, _, _, mlm = runs
    with pytest.raises(ConfigError) as err:
        train(make([*SEQ2SEQ, f"ckpt_path={mlm.last_checkpoint}"], "named"))
    assert str(err.value) == (f"ckpt_path={mlm.last_checkpoint}: checkpoint {mlm.last_checkpoint} is an "
                              "encoder model trained on task mlm, this run is encoder_decoder / seq2seq")

