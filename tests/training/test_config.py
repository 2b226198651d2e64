"""Config composition and validation before training: defaults, auto data per architecture, overrides,
and one clear error for each kind of bad input."""

from __future__ import annotations

import pytest
import torch
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf.errors import ConfigKeyError

from zoo.apps import ConfigError
from zoo.training.plan import prepare
from zoo.training.run import open_run


@pytest.mark.parametrize(
    ("model", "task", "data"),
    [("gpt_small", "lm", "stdlib_text"), ("bert_small", "mlm", "stdlib_text"),
     ("transformer_tiny", "seq2seq", "translation_toy")],
)
def test_data_follows_the_architecture(make_cfg, model, task, data):
    plan = prepare(make_cfg([f"model={model}"]))
    assert plan.task.name == task and plan.data_cfg["name"] == data
    assert plan.trainer_kwargs["precision"] == "32-true"  # CPU default


def test_defaults_and_overrides(make_cfg):
    cfg = make_cfg([])
    assert cfg.model.arch == "decoder" and cfg.logger.name == "wandb" and cfg.tokenizer.name == "bpe"
    plan = prepare(make_cfg(["model.n_heads=8", "model.norm_placement=post", "trainer.max_steps=500"]))
    assert plan.model.n_heads == 8 and plan.model.norm_placement == "post"
    assert plan.trainer_kwargs["max_steps"] == 500
    # an LM "epoch" is one evaluation interval, so checkpoints fall on epoch ends (exact resume)
    assert plan.data_cfg["blocks_per_epoch"] == cfg.eval_every * cfg.batch_size


def test_auto_data_takes_extra_keys(make_cfg):
    plan = prepare(make_cfg(["model=transformer_tiny", "+data.n_pairs=500"]))
    assert plan.data_cfg["name"] == "translation_toy" and plan.data_cfg["n_pairs"] == 500


def test_classifier_head_trains_classification(make_cfg):
    plan = prepare(make_cfg(["model=bert_small", "model.head={name:classifier,num_labels:2}",
                             "data=classification", "data.path=x.jsonl"]))
    assert plan.task.name == "classification"


def test_classifier_num_labels_may_come_from_the_data(make_cfg):
    plan = prepare(make_cfg(["model=bert_small", "model.head=classifier", "data=classification",
                             "data.path=x.jsonl"]))
    assert plan.task.name == "classification" and plan.model.head.num_labels == 0  # filled in from the data


def test_unknown_group_option_and_misspelled_key_fail_at_composition(make_cfg):
    with pytest.raises(MissingConfigException, match="gpt_smal"):
        make_cfg(["model=gpt_smal"])
    with pytest.raises((ConfigCompositionException, ConfigKeyError), match="n_head"):
        make_cfg(["model.n_head=8"])
    with pytest.raises((ConfigCompositionException, ConfigKeyError), match="max_stepz"):
        make_cfg(["trainer.max_stepz=5"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("overrides", [["trainer=gpu"], ["trainer=ddp"], ["trainer.precision=16-mixed"]])
def test_gpu_settings_without_a_gpu_raise_one_clear_error(make_cfg, overrides):
    """Hardware-dependent refusals; every other bad input is a row of bad_inputs.py (the docs table)."""
    with pytest.raises(ConfigError, match="needs a CUDA GPU|needs a GPU"):
        prepare(make_cfg(overrides))


def test_not_a_checkpoint(make_cfg, tmp_path):
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"this is not a checkpoint")
    with pytest.raises(ConfigError, match="junk.ckpt is not a PyTorch checkpoint"):  # opened before any data
        open_run(prepare(make_cfg([f"ckpt_path={junk}"])))


@pytest.mark.parametrize("group", [
    "trainer=cpu", "trainer=ddp_cpu", "logger=csv", "logger=none", "debug=fdr", "debug=overfit",
    "experiment=translation", "experiment=smoke", "scheduler=inverse_sqrt", "scheduler=constant",
    "callbacks=with_attention_maps", "tokenizer=char", "tokenizer=file tokenizer.path=tok.json",
    "data=text data.files=a.txt", "data=text data.files=[a.txt,b.txt]", "data=hf data.path=corpus.parquet",
    "model=transformer_tiny data=pairs data.path=p.tsv", "compile.enabled=true compile.mode=max-autotune",
    "callbacks.samples.top_k=null callbacks.checkpoint.mode=max", "trainer.devices=auto",
    "+data.max_bytes=null", "optim.lr=1", "seed=4294967295",
])
def test_every_group_option_composes(make_cfg, group):
    """The YAML in conf/ and ordinary values pass every key and value check (no false refusals)."""
    plan = prepare(make_cfg(group.split()))
    assert plan.trainer_kwargs["max_steps"] >= 1
