"""What a run prints (zoo.training.console): progress lines while training when stdout is not a terminal,
no third-party tips or dependency deprecations, real warnings kept, and the closing summary."""

from __future__ import annotations

import logging
import re
import warnings

import pytest

from zoo.training.console import LineProgress, quiet_third_party, summary_lines
from zoo.training.run import TrainResult

SMOKE = ["experiment=smoke", "data.max_bytes=120000", "tokenizer.vocab_size=300", "model.max_seq_len=32",
         "trainer.num_sanity_val_steps=0", "callbacks.samples.max_new_tokens=4"]


@pytest.mark.e2e
def test_piped_run_prints_progress_lines_without_third_party_noise(tmp_path, run_cli, cache_dir):
    run_dir = tmp_path / "run"
    proc = run_cli([*SMOKE, "logger=wandb", "trainer.max_steps=6", "eval_every=3",
                    "callbacks.progress_bar.every_n_steps=2", f"hydra.run.dir={run_dir}",
                    f"paths.cache_dir={cache_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out, both = proc.stdout, proc.stdout + proc.stderr
    lines = re.findall(r"^step (\d+)/6 \| loss (\S+) \| ([\d,]+) tok/s \| \S+ elapsed, ETA \S+$", out, re.M)
    assert [int(step) for step, _, _ in lines] == [2, 4, 6], out
    assert all(float(loss) > 0 and int(rate.replace(",", "")) > 0 for _, loss, rate in lines)
    assert re.search(r"^step 3: val/loss \d+\.\d+, val/ppl \d+\.\d+$", out, re.M), out
    # printed during the run: before the end-of-fit samples (a redirected rich bar appears only at the end)
    assert out.index("step 2/6 |") < out.index("=== samples (lm) ===")
    assert "it/s" not in out  # no progress bar drawn into the log
    for noise in ("💡 Tip", "LeafSpec", "anonymous setting", "litlogger", "URL not available",
                  "on_before_batch_transfer"):
        assert noise not in both, f"{noise!r} printed:\n{both[-3000:]}"
    ckpts = run_dir / "checkpoints"
    assert f"  best checkpoint: {ckpts / 'best.ckpt'}" in out
    assert (f"ckpt_path={ckpts / 'last.ckpt'}" in out
            and "  resume:   python train.py experiment=smoke " in out)
    assert f"  generate: python generate.py ckpt={ckpts / 'best.ckpt'} prompt=" in out
    assert re.search(r"^  W&B run:  \S*offline-run-\S+$", out, re.M), out


def test_filters_drop_only_the_listed_messages():
    quiet_third_party()
    import lightning_utilities.core.rank_zero as rank_zero

    log = rank_zero.log  # where Lightning's rank_zero_info writes
    tip = logging.LogRecord(log.name, logging.INFO, __file__, 1, "💡 Tip: For seamless cloud logging ...",
                            None, None)
    other = logging.LogRecord(log.name, logging.INFO, __file__, 1, "GPU available: False, used: False", None,
                              None)
    assert not all(f.filter(tip) for f in log.filters) and all(f.filter(other) for f in log.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        quiet_third_party()  # the catch above reset the filters; reinstall inside it
        warnings.warn_explicit("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning,
                               "_pytree.py", 21, module="lightning.pytorch.utilities._pytree")
        warnings.warn_explicit("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning,
                               "mine.py", 1, module="zoo.mine")  # same text from elsewhere: shown
        # zoo resumes exactly itself
        warnings.warn_explicit("You're resuming from a checkpoint that ended before the epoch ended and your "
                               "dataloader is not resumable. ...", UserWarning, "training_epoch_loop.py", 224,
                               module="lightning.pytorch.loops.training_epoch_loop")
        warnings.warn_explicit("a real deprecation", FutureWarning, __file__, 2, module="zoo.real")
    assert [(w.filename, w.category) for w in caught] == [("mine.py", FutureWarning),
                                                          (__file__, FutureWarning)]


def test_summary_names_everything_a_user_needs_next(tmp_path):
    result = TrainResult({}, tmp_path, tmp_path / "best.ckpt", tmp_path / "last.ckpt", None,
                         wandb_run="https://wandb.ai/me/zoo/runs/abc", generate_with="src")
    text = "\n".join(summary_lines(result, ["model=transformer_tiny", "ckpt_path=old.ckpt", "optim.lr=3e-4"]))
    assert f"run folder: {tmp_path}" in text and "W&B run:  https://wandb.ai/me/zoo/runs/abc" in text
    assert f"python train.py model=transformer_tiny optim.lr=3e-4 ckpt_path={tmp_path / 'last.ckpt'}" in text
    assert f"python generate.py ckpt={tmp_path / 'best.ckpt'} src=" in text
    encoder = TrainResult({}, tmp_path, None, None, None)  # nothing saved, nothing to generate with
    assert summary_lines(encoder) == [f"run folder: {tmp_path}"]


def test_summary_of_a_finished_run_resumes_to_more_steps(tmp_path):
    """A run that stopped at trainer.max_steps resumed as it was trains nothing (and is refused): the resume
    line raises trainer.max_steps, and says so."""
    result = TrainResult({}, tmp_path, None, tmp_path / "last.ckpt", None, finished_at=300)
    lines = summary_lines(result, ["model=gpt_nano", "trainer.max_steps=300", "ckpt_path=old.ckpt"])
    assert "  finished: step 300 is trainer.max_steps; the resume line trains on to 600" in lines
    last = tmp_path / "last.ckpt"
    assert f"  resume:   python train.py model=gpt_nano trainer.max_steps=600 ckpt_path={last}" in lines


def test_every_n_steps_must_be_positive():
    with pytest.raises(ValueError, match="every_n_steps must be >= 1, got 0"):
        LineProgress(every_n_steps=0)
