"""Config composition and validation before training: defaults, auto data per architecture, overrides,
and one clear error for each kind of bad input."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf.errors import ConfigKeyError

from zoo.training.run import ConfigError, prepare


@pytest.mark.parametrize(
    ("model", "task", "data"),
    [("gpt_small", "lm", "stdlib_text"), ("bert_small", "mlm", "stdlib_text"),
     ("transformer_tiny", "seq2seq", "translation_toy")],
)
def test_data_follows_the_architecture(make_cfg, model, task, data):
    plan = prepare(make_cfg([f"model={model}"]))
    assert plan.task == task and plan.data_cfg["name"] == data
    assert plan.trainer_kwargs["precision"] == "32-true"  # CPU default


def test_defaults_and_overrides(make_cfg):
    cfg = make_cfg([])
    assert cfg.model.arch == "decoder" and cfg.logger.name == "wandb" and cfg.tokenizer.name == "bpe"
    plan = prepare(make_cfg(["model.n_heads=8", "model.norm_placement=post", "trainer.max_steps=500"]))
    assert plan.model_cfg["n_heads"] == 8 and plan.model_cfg["norm_placement"] == "post"
    assert plan.trainer_kwargs["max_steps"] == 500
    # an LM "epoch" is one evaluation interval, so checkpoints fall on epoch ends (exact resume)
    assert plan.data_cfg["blocks_per_epoch"] == cfg.eval_every * cfg.batch_size


def test_auto_data_takes_extra_keys(make_cfg):
    plan = prepare(make_cfg(["model=transformer_tiny", "+data.n_pairs=500"]))
    assert plan.data_cfg["name"] == "translation_toy" and plan.data_cfg["n_pairs"] == 500


def test_classifier_head_trains_classification(make_cfg):
    plan = prepare(make_cfg(["model=bert_small", "model.head=classifier", "model.num_labels=2",
                             "data=classification", "data.path=x.jsonl"]))
    assert plan.task == "classification"


def test_classifier_num_labels_may_come_from_the_data(make_cfg):
    plan = prepare(make_cfg(["model=bert_small", "model.head=classifier", "data=classification", "data.path=x.jsonl"]))
    assert plan.task == "classification" and plan.model_cfg["num_labels"] == 0  # filled in from the data


def test_unknown_group_option_and_misspelled_key_fail_at_composition(make_cfg):
    with pytest.raises(MissingConfigException, match="gpt_smal"):
        make_cfg(["model=gpt_smal"])
    with pytest.raises((ConfigCompositionException, ConfigKeyError), match="n_head"):
        make_cfg(["model.n_head=8"])
    with pytest.raises((ConfigCompositionException, ConfigKeyError), match="max_stepz"):
        make_cfg(["trainer.max_stepz=5"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.n_heads=5"], "not divisible"),
        (["task=seq2seq"], "task=seq2seq needs model.arch"),
        (["task=classification", "model=bert_small"], "model.head=classifier"),
        (["task=mlm", "model=bert_small", "model.head=classifier", "model.num_labels=2"], "task=mlm needs model.head=lm"),
        (["trainer.precision=16-mixed"], "16-mixed needs a GPU"),
        (["trainer=gpu"], "needs a CUDA GPU"),
        (["trainer=ddp"], "needs a CUDA GPU"),
        (["+trainer.max_stepz=5"], "Did you mean 'max_steps'"),
        (["trainer.max_steps=0"], "max_steps"),
        (["ckpt_path=/nonexistent/last.ckpt"], "checkpoint not found"),
        (["ckpt_path=last"], "no earlier run"),
        (["scheduler.name=inverse_sqrt"], r"scheduler.min_lr_ratio is not an option of scheduler 'inverse_sqrt'"),
        (["scheduler=inverse_sqrt", "+scheduler.min_lr_ratio=0.1"], "use|switch schedules with the config group"),
        (["scheduler.min_lr_ratio=2"], r"min_lr_ratio must be in \[0, 1\]"),
        (["scheduler=inverse_sqrt", "scheduler.warmup_steps=0"], "warmup_steps >= 1"),
    ],
)
def test_impossible_combinations_raise_one_clear_error(make_cfg, overrides, message):
    with pytest.raises(ConfigError, match=message):
        prepare(make_cfg(overrides))


def test_not_a_checkpoint(make_cfg, tmp_path):
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"this is not a checkpoint")
    with pytest.raises(ConfigError, match="not a readable checkpoint"):
        prepare(make_cfg([f"ckpt_path={junk}"]))


@pytest.mark.parametrize("group", ["trainer=cpu", "trainer=ddp_cpu", "logger=csv", "logger=none", "debug=fdr",
                                   "debug=overfit", "experiment=translation", "experiment=smoke",
                                   "scheduler=inverse_sqrt", "scheduler=constant"])
def test_every_group_option_composes(make_cfg, group):
    plan = prepare(make_cfg([group]))
    assert plan.trainer_kwargs["max_steps"] >= 1
