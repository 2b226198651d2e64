"""Every registered task, end to end on tiny CPU configs: the config resolves to it, it builds its data
module, a training step and a validation run through ZooLightningModule with finite losses and the
logged validation loss equal to a recomputation, the loss weight (counted_labels) makes batch losses
average like one big batch, and the trained model produces samples. A new task in TASKS is picked up here."""

from __future__ import annotations

import math
from copy import deepcopy

import lightning as L
import pytest
import torch
from omegaconf import DictConfig

from zoo.apps import ConfigError
from zoo.config import ModelConfig
from zoo.models import ARCHS
from zoo.modules.heads import HEADS as HEAD_REGISTRY
from zoo.presets import build
from zoo.tasks import TASKS, build_data, default_task
from zoo.tasks.samples import SampleReport, make_samples
from zoo.training.module import ZooLightningModule
from zoo.training.plan import prepare
from zoo.utils import IGNORE_INDEX

from .conftest import TINY_MODEL, compose_cfg, tiny_data

NAMES = TASKS.names()
HEADS = tuple(HEAD_REGISTRY.names())
VAL_BATCHES = 2


def own_model(task) -> list[str]:
    """Overrides giving the tiny model the task's first architecture and its head."""
    return [*TINY_MODEL, f"model.arch={task.archs[0]}", f"model.head={task.head}"]


def with_task(cfg: DictConfig, name: str) -> DictConfig:
    """A copy of a composed config with `task=name`: what composing with that override gives, since `task`
    is a plain key that no interpolation or group reads (one Hydra compose for all of a test's choices)."""
    copy = deepcopy(cfg)
    copy.task = name
    return copy


# ------------------------------------------------------------------------------------------ task=auto


@pytest.mark.parametrize(("arch", "head", "expected"), [
    ("decoder", "lm", "lm"), ("encoder", "lm", "mlm"), ("encoder", "classifier", "classification"),
    ("encoder_decoder", "lm", "seq2seq"),
])
def test_auto_follows_the_documented_rules(arch, head, expected):
    assert default_task(ModelConfig(arch=arch, head=head)).name == expected


@pytest.mark.parametrize(("task", "head"), [("classification", "lm"), ("token_classification", "qa"),
                                            ("classification", "none")])
def test_a_labelled_task_on_a_head_without_labels_names_the_head_it_needs(task, head):
    """The head's num_labels stands in only where the head reads it (was: AttributeError on lm's settings)."""
    needed = TASKS.get(task).head
    with pytest.raises(ValueError, match=rf"task={task} needs model.head={needed}, but model.head={head}"):
        TASKS.get(task).check_model(ModelConfig(arch="encoder", head=head))


@pytest.mark.parametrize("overrides", [["model=gpt_nano"], ["model=bert_small", "model.head=qa"]])
def test_a_plan_of_a_head_without_labels_checks_its_finetune_names(overrides, tmp_path):
    """prepare() checks finetune names on the model as built; a head without num_labels is taken as it is
    (was: AttributeError: 'LMHeadSettings' object has no attribute 'num_labels')."""
    with pytest.raises(ConfigError, match=r"finetune.modules.*nothing_named_so"):
        prepare(compose_cfg([*overrides, "finetune=freeze", "finetune.modules=[nothing_named_so]"],
                            tmp_path, tmp_path / "cache"))


@pytest.mark.parametrize("arch", ARCHS.names())
@pytest.mark.parametrize("head", HEADS)
def test_at_most_one_task_is_the_default_for_a_model(arch, head):
    claims = [name for name in NAMES if TASKS.get(name).is_default_for(ModelConfig(arch=arch, head=head))]
    assert len(claims) <= 1, claims


@pytest.mark.parametrize("name", NAMES)
def test_task_resolves_from_its_name_and_from_auto(make_cfg, name, task_files):
    task = TASKS.get(name)
    assert set(task.archs) <= set(ARCHS.names()) and task.head in HEADS
    cfg = make_cfg([*own_model(task), f"task={name}", *tiny_data(task.corpus_kind, task_files)])
    plan = prepare(with_task(cfg, name))
    assert plan.task is task and plan.model.arch == task.archs[0] and isinstance(plan.model, ModelConfig)
    if task.auto:
        assert prepare(with_task(cfg, "auto")).task is task
    for other in NAMES:  # every other task refuses this model, naming what it needs
        if task.archs[0] not in TASKS.get(other).archs or TASKS.get(other).head != task.head:
            with pytest.raises(ConfigError, match=f"task={other} needs model"):
                prepare(with_task(cfg, other))


@pytest.mark.parametrize("name", NAMES)
def test_data_auto_is_the_builtin_data(make_cfg, name):
    task = TASKS.get(name)
    if task.builtin_data is None:
        with pytest.raises(ConfigError, match=f"task={name} has no built-in data; name one, e.g. data="):
            prepare(make_cfg([*own_model(task), f"task={name}"]))
    else:
        assert prepare(make_cfg([*own_model(task), f"task={name}"])).data_cfg["name"] == task.builtin_data


@pytest.mark.parametrize("name", NAMES)
def test_label_smoothing_is_refused_unless_the_task_implements_it(make_cfg, name, task_files):
    task = TASKS.get(name)
    cfg = make_cfg([*own_model(task), f"task={name}", *tiny_data(task.corpus_kind, task_files),
                    "label_smoothing=0.1"])
    if task.label_smoothing:
        assert prepare(cfg).task is task
    else:
        with pytest.raises(ConfigError,
                           match=f"label_smoothing=0.1 applies to task=.* only, not task={name}"):
            prepare(cfg)


# ------------------------------------------------------------------------------- data, steps, samples


@pytest.fixture(scope="module", params=NAMES)
def trained(request, tmp_path_factory, cache_dir, task_files):
    """(task, plan, tokenizer, datamodule, module, trainer) after one training step and one validation."""
    name = request.param
    task = TASKS.get(name)
    overrides = [*own_model(task), f"task={name}", *tiny_data(task.corpus_kind, task_files)]
    plan = prepare(compose_cfg(overrides, tmp_path_factory.mktemp(name), cache_dir))
    tokenizer, datamodule = build_data(plan.data_cfg, plan.tokenizer_cfg, task=plan.task,
                                       max_seq_len=plan.model.max_seq_len, batch_size=4,
                                       cache_dir=plan.resolved["paths"]["cache_dir"], seed=0)
    model = build(plan.task.model_config(plan.model, tokenizer))
    module = ZooLightningModule(model, task=name, tokenizer=tokenizer, optim=plan.resolved["optim"],
                                scheduler=plan.resolved["scheduler"],
                                task_settings=plan.resolved.get(task.settings_group or ""))
    trainer = L.Trainer(accelerator="cpu", max_steps=1, val_check_interval=1, check_val_every_n_epoch=None,
                        limit_val_batches=VAL_BATCHES, num_sanity_val_steps=0, logger=False,
                        log_every_n_steps=1,  # train/loss is computed on logging steps only
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, datamodule=datamodule)
    return task, plan, tokenizer, datamodule, module, trainer


def test_one_step_and_validation(trained):
    task, plan, tokenizer, datamodule, module, trainer = trained
    assert module.task.name == task.name and trainer.global_step == 1
    task = module.task  # the task bound to the model (itself, or dpo's with its reference: Task.for_model)
    metrics = trainer.callback_metrics
    assert math.isfinite(float(metrics["train/loss"]))
    expected = {"val/loss", *(["val/ppl"] if task.perplexity else []),
                *(f"val/{n}" for n in task.val_metrics())}
    assert {k for k in metrics if k.startswith("val/")} == expected
    total, weight = 0.0, 0
    module.model.eval()
    with torch.no_grad():  # the logged loss is the label-weighted mean over the validation batches
        for i, batch in enumerate(datamodule.val_dataloader()):
            if i == VAL_BATCHES:
                break
            batch = task.prepare_batch(batch, trainer.global_step, training=False)  # grpo: its rollouts
            n = int(task.counted_labels(batch))
            loss = task.loss(module.model(**task.model_inputs(batch)), batch)
            total, weight = total + float(loss) * n, weight + n
    assert float(metrics["val/loss"]) == pytest.approx(total / weight, rel=1e-5)
    if task.perplexity:
        assert float(metrics["val/ppl"]) == pytest.approx(math.exp(total / weight), rel=1e-4)


def test_loss_weight_averages_batches_like_one_batch(trained):
    """Split a batch 1 + 3 rows with random labels, row 0 keeping only its first two labels and the others
    all but their first: the batch losses weighted by counted_labels average to the loss of the whole
    batch (a wrong count, e.g. one that counts a shifted-away position or a classification batch as one
    example, does not)."""
    task, plan, tokenizer, datamodule, module, trainer = trained
    task = module.task  # bound to the model (dpo: with its reference)
    batch = dict(task.prepare_batch(next(iter(datamodule.train_dataloader())), 0, training=True))
    generator = torch.Generator().manual_seed(0)
    rows = [slice(0, 1), slice(1, None)]
    if "rollout" in batch:  # grpo: split the sampled completions (the advantages come with them)
        batch = {"rollout": batch["rollout"]}
    elif "completion_mask" in batch:  # preference pairs: [chosen x B; rejected x B], split pair 0 | 1..B-1
        pairs = batch["input_ids"].shape[0] // 2
        rows = [torch.tensor([0, pairs]), torch.tensor([*range(1, pairs), *range(pairs + 1, 2 * pairs)])]
    elif "start_positions" in batch:  # extractive QA: one (start, end) pair of positions per window (B,)
        for key in ("start_positions", "end_positions"):
            batch[key] = torch.randint(0, batch["input_ids"].shape[1], batch[key].shape, generator=generator)
    else:
        key = "targets" if "targets" in batch else "labels"  # causal LM batches carry shifted targets
        labels = torch.randint(0, module.model.label_classes, batch[key].shape, generator=generator)
        # (B, T): where the conventions differ (a shift, a start token) is the first positions
        if labels.dim() == 2:
            labels[0, 2:] = IGNORE_INDEX
            labels[1:, 0] = IGNORE_INDEX
        batch[key] = labels
    parts = [{k: v[part] for k, v in batch.items()} for part in rows]

    def loss(b):
        return float(task.loss(module.model(**task.model_inputs(b)), b))

    module.model.eval()
    with torch.no_grad():
        losses = [loss(part) for part in parts]
        counts = [int(task.counted_labels(part)) for part in parts]
        whole = loss(batch)
    assert all(c > 0 for c in counts)
    assert (sum(loss * c for loss, c in zip(losses, counts, strict=True)) / sum(counts)
            == pytest.approx(whole, rel=1e-5))


def test_samples_and_references(trained):
    task, plan, tokenizer, datamodule, module, trainer = trained
    options = {**plan.resolved["callbacks"]["samples"], "num_shown": 2, "max_new_tokens": 4,
               "max_examples": 5}
    module.model.train()
    report = make_samples(module.task, module.model, tokenizer, datamodule, options)  # the bound task
    assert module.model.training  # the mode is put back
    assert isinstance(report, SampleReport) and report.samples
    assert all(isinstance(s.input, str) and isinstance(s.output, str) for s in report.samples)
    assert all(math.isfinite(v) for v in report.metrics.values())
    if task.has_references:
        hyps, refs = task.references(module.model, tokenizer, datamodule, 3)
        assert len(hyps) == len(refs) == 3 and all(r for r in refs)  # texts, or lists (gold answers, tags)
        assert all(math.isfinite(fn(hyps, refs)) for fn in task.reference_metrics.values())


def test_training_loss_with_and_without_smoothing(trained):
    task, plan, tokenizer, datamodule, module, trainer = trained
    task = module.task  # bound to the model (dpo: with its reference)
    batch = task.prepare_batch(next(iter(datamodule.train_dataloader())), 0, training=True)
    with torch.no_grad():
        out = module.model(**task.model_inputs(batch))
    plain = task.loss(out, batch)
    assert torch.isfinite(plain) and torch.equal(task.training_loss(out, batch, 0.0), plain)
    if task.label_smoothing:
        smoothed = task.training_loss(out, batch, 0.1)
        assert torch.isfinite(smoothed) and not torch.equal(smoothed, plain)
