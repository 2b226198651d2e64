"""Exact mid-epoch resume for the post-training tasks (issue 38): task=sft on chat rows and task=dpo on
preference pairs, killed after the step-4 checkpoint (inside the first epoch) and resumed with
ckpt_path=last, log the train losses of the uninterrupted run (1e-6), dropout on. task=dpo's reference is
the model as training starts: rebuilt from the same seed (a live frozen copy) or, with
dpo.reference=precomputed, the log-probs stored in the checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from zoo.apps import ConfigError
from zoo.tasks import dpo
from zoo.training.run import train

from .conftest import killed_and_resumed, train_losses

pytestmark = pytest.mark.e2e  # trains four runs each

RUN = ["model=gpt_nano", "model.max_seq_len=48", "model.dropout=0.1", "tokenizer.vocab_size=300",
       "batch_size=4", "logger=csv", "trainer.accelerator=cpu", "trainer.max_steps=8", "eval_every=4",
       "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false",
       "trainer.log_every_n_steps=1", "callbacks.samples=null", "callbacks.progress_bar=null",
       "optim.lr=3e-3", "scheduler.warmup_steps=2"]
NAMES = ("Ann", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Hal", "Ida", "Jo")


def write_chats(path: Path) -> Path:
    """60 conversations (54 train rows: 14 batches of 4, so step 4 and step 6 fall inside epoch 0)."""
    rows = [{"messages": [{"role": "user", "content": f"Add {a} and {b}, {name}?"},
                          {"role": "assistant", "content": f"{a + b}."}]}
            for name in NAMES for a, b in ((1, 2), (3, 4), (5, 6), (7, 1), (2, 2), (9, 3))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_pairs(path: Path, messages: bool = False) -> Path:
    """60 preference pairs (text, or the same as messages)."""
    rows = []
    for name in NAMES:
        for a, b in ((1, 2), (3, 4), (5, 6), (7, 1), (2, 2), (9, 3)):
            prompt, good, bad = f"Add {a} and {b}, {name}? ", f"{a + b}.", f"{a + b + 1}."
            rows.append({"prompt": [{"role": "user", "content": prompt}],
                         "chosen": [{"role": "assistant", "content": good}],
                         "rejected": [{"role": "assistant", "content": bad}]} if messages else
                        {"prompt": prompt, "chosen": good, "rejected": bad})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def assert_resumed_equal(straight: dict, resumed: dict) -> None:
    assert sorted(resumed) == [4, 5, 6, 7]  # continued from the step-4 checkpoint, inside epoch 0
    for step in resumed:
        assert resumed[step] == pytest.approx(straight[step], abs=1e-6), step


def test_sft_resumed_mid_epoch_matches_uninterrupted(make_cfg, monkeypatch, tmp_path):
    common = [*RUN, "task=sft", "data=chat", f"data.path={write_chats(tmp_path / 'chats.jsonl')}"]
    assert_resumed_equal(*killed_and_resumed(make_cfg, monkeypatch, common, "sft"))


@pytest.mark.parametrize("reference", ["live", "precomputed"])
def test_dpo_resumed_mid_epoch_matches_uninterrupted(make_cfg, monkeypatch, tmp_path, reference):
    calls = []
    original = dpo.reference_logps
    monkeypatch.setattr(dpo, "reference_logps", lambda *a, **k: calls.append(1) or original(*a, **k))
    common = [*RUN, "task=dpo", "data=preference", f"data.path={write_pairs(tmp_path / 'pairs.jsonl')}",
              f"dpo.reference={reference}"]
    assert_resumed_equal(*killed_and_resumed(make_cfg, monkeypatch, common, "dpo"))
    # precomputed: train and val pairs scored once by the straight and the killed run; the resumed run
    # takes them from its checkpoint
    assert len(calls) == (4 if reference == "precomputed" else 0)


def test_grpo_resumed_inside_a_generation_batch_matches_uninterrupted(make_cfg, monkeypatch, tmp_path):
    """task=grpo, three optimisation steps per generation batch: the step-4 checkpoint falls inside the batch
    generated at step 3, which the checkpoint keeps; the prompt order continues from its place."""
    rows = [{"prompt": f"Add {a} and {b}, {name}? ", "answer": str(a + b)}
            for name in NAMES for a, b in ((1, 2), (3, 4), (5, 6), (7, 1), (2, 2), (9, 3))]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    common = [*RUN, "task=grpo", "data=prompts", f"data.path={tmp_path / 'prompts.jsonl'}",
              "grpo.rewards=[answer_match]", "grpo.num_generations=4", "grpo.max_completion_length=4",
              "grpo.num_iterations=3", "grpo.beta=0.04"]
    assert_resumed_equal(*killed_and_resumed(make_cfg, monkeypatch, common, "grpo"))


def test_dpo_precomputed_reference_trains_as_the_live_one(make_cfg, tmp_path):
    """Conversational pairs (the default tokenizer's chat template): the same train losses and validation
    rewards with the reference precomputed as with a live frozen copy; a checkpoint of the live run cannot be
    resumed with dpo.reference=precomputed (its weights are no longer the reference)."""
    common = [*RUN, "trainer.max_steps=4", "model.dropout=0.0", "task=dpo", "data=preference",
              f"data.path={write_pairs(tmp_path / 'pairs.jsonl', messages=True)}"]
    cached = train(make_cfg([*common, "dpo.reference=precomputed"], run="cached"))
    live = train(make_cfg([*common, "dpo.reference=live"], run="live"))  # the newest: ckpt_path=last's
    ours, theirs = train_losses(cached.output_dir), train_losses(live.output_dir)
    assert sorted(ours) == [0, 1, 2, 3]
    assert ours == pytest.approx(theirs, abs=1e-6)
    assert ours[0] == pytest.approx(math.log(2), abs=1e-6)  # policy == reference at the first step
    for name in ("val/loss", "val/rewards/margins", "val/rewards/chosen", "val/logps/rejected"):
        assert cached.metrics[name] == pytest.approx(live.metrics[name], abs=1e-6), name
    with pytest.raises(ConfigError, match=r"^ckpt_path=last: dpo.reference=precomputed, but the checkpoint "
                                          r"holds no precomputed reference log-probs"):
        train(make_cfg([*common, "trainer.max_steps=8", "dpo.reference=precomputed", "ckpt_path=last"],
                       run="refused"))


@pytest.mark.parametrize("case", ["sft", "dpo-live", "dpo-precomputed"])
def test_two_ddp_processes_match_one(tmp_path, run_cli, make_cfg, cache_dir, case):
    """Two CPU processes (trainer=ddp_cpu, gloo) of 2 rows each log the losses of one process of 4: sft's
    mean over the global batch's trained tokens, dpo's over its pairs (each process scores its own pairs
    against its own reference: a frozen copy, or every pair precomputed). No dropout: each process draws its
    own masks."""
    task, _, reference = case.partition("-")
    data = (["task=sft", "data=chat", f"data.path={write_chats(tmp_path / 'chats.jsonl')}"] if task == "sft"
            else ["task=dpo", "data=preference", f"data.path={write_pairs(tmp_path / 'pairs.jsonl')}",
                  f"dpo.reference={reference}"])
    base = [*RUN, *data, "trainer.max_steps=3", "eval_every=3", "model.dropout=0.0"]
    single = train_losses(train(make_cfg([*base, "batch_size=4", "trainer=cpu"], run="one")).output_dir)
    two = run_cli([*base, "batch_size=2", "trainer=ddp_cpu", f"hydra.run.dir={tmp_path / 'two'}",
                   f"paths.cache_dir={cache_dir}"])
    assert two.returncode == 0, two.stderr[-3000:]
    ddp = train_losses(tmp_path / "two")
    assert sorted(single) == sorted(ddp) == [0, 1, 2]
    for step in single:
        assert ddp[step] == pytest.approx(single[step], abs=1e-5), step
