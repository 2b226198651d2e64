"""What a training task is: a registered object that knows which models it trains, its data, how the loss
of a batch is weighed and scored, and what the trained model shows at the end. The training app and the
data code ask the task; nothing outside a task's own file compares task names.

A new task is one file in `zoo/tasks/` with a `Task` subclass decorated by `@register` (and its import in
`zoo/tasks/__init__.py`); tests/tasks/ loops over `TASKS` and picks it up."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from zoo.config import ModelConfig
from zoo.models import check_config
from zoo.registry import Registry
from zoo.tasks.metrics import exact_match
from zoo.tokenizers import model_overrides
from zoo.utils import IGNORE_INDEX

if TYPE_CHECKING:
    from torchmetrics import Metric

    from zoo.data.datamodules import ZooDataModule
    from zoo.models.base import ModelOutput
    from zoo.tasks.evaluating import EvalOptions
    from zoo.tasks.samples import SampleReport

TASKS: Registry[Task] = Registry("task")


class Task:
    """One training task. Class attributes describe it; methods answer for it. Override what differs."""

    name: str = ""
    archs: tuple[str, ...] = ()  # model.arch values it trains
    # model.arch values it does not train -> what trains that architecture on such data (named in the error)
    instead: Mapping[str, str] = types.MappingProxyType({})
    head: str = "lm"  # the model.head it needs
    auto: bool = True  # task=auto picks it for its archs with its head (at most one task per arch and head)
    builtin_data: str | None = None  # conf/data/<name>.yaml that data=auto reads; None: the user names data
    user_data: str = ""  # how to name one's own data, for messages: "data=text data.files=..."
    corpus_kind: str = "text"  # the corpus its data source must give: text | pairs | labelled
    perplexity: bool = True  # the loss is a per-token cross-entropy over the vocabulary (exp: perplexity)
    label_smoothing: bool = False  # training_loss implements label smoothing
    has_references: bool = False  # validation examples carry reference texts (the exact_match callback)
    # special tokens its data needs from the tokenizer; each group: any one of those roles (check_tokenizer)
    needed_specials: tuple[tuple[str, ...], ...] = ()
    chunked_loss: bool = False  # loss_from_hidden is implemented: memory.loss_chunk_size applies
    settings_group: str | None = None  # a top-level config group only this task reads (task=dpo: dpo.*)
    next_tokens: bool = False  # its batches carry each position's next token (next_token_targets): model.mtp
    # trainer.strategy names this task cannot train under -> why (the plan refuses them by name)
    refused_strategies: Mapping[str, str] = types.MappingProxyType({})
    # name -> fn(outputs, references): what the exact_match callback logs as val/<name> (has_references)
    reference_metrics: Mapping[str, Callable[[Sequence[str], Sequence[str]], float]] = types.MappingProxyType(
        {"exact_match": exact_match})

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    # ------------------------------------------------------------------------------- config
    def is_default_for(self, cfg: ModelConfig) -> bool:
        """Whether task=auto trains this task for `cfg`."""
        return self.auto and cfg.arch in self.archs and cfg.head.name == self.head

    def check_model(self, cfg: ModelConfig) -> None:
        """Raise ValueError unless this task trains `cfg`'s architecture and head, then check the model as
        it will be built (names resolved, each component's needs: `zoo.models.check_config`)."""
        if cfg.arch not in self.archs:
            hint = f"; {self.instead[cfg.arch]}" if cfg.arch in self.instead else ""
            raise ValueError(f"task={self.name} needs model.arch in {list(self.archs)}, "
                             f"but model.arch={cfg.arch}{hint}")
        if cfg.head.name != self.head:
            other = [t.name for t in all_tasks() if t.is_default_for(cfg)]
            hint = f" (that trains task={other[0]})" if other else ""
            raise ValueError(f"task={self.name} needs model.head={self.head}, "
                             f"but model.head={cfg.head.name}{hint}")
        if cfg.mtp is not None and not self.next_tokens:
            able = "|".join(t.name for t in all_tasks() if t.next_tokens)
            raise ValueError(f"model.mtp={cfg.mtp.name} trains on each position's next tokens, which "
                             f"task={self.name} does not give; train it with task={able}, or set "
                             "model.mtp=null.")
        check_config(cfg)

    def check_label_smoothing(self, value: float) -> None:
        """Raise ValueError for a nonzero label_smoothing this task's training_loss does not implement."""
        if value and not self.label_smoothing:
            able = "|".join(t.name for t in all_tasks() if t.label_smoothing)
            raise ValueError(f"label_smoothing={value} applies to task={able} only, not task={self.name}; "
                             "leave label_smoothing=0.0")

    def settings(self, given: Mapping[str, Any]) -> Any:
        """Its `settings_group` as given, checked (one ValueError naming the key), as the object it reads."""
        return None

    def check_chosen(self, given: Mapping[str, Any]) -> None:
        """Raise ValueError when this task, chosen for a run, cannot run with its settings group `given`
        beyond what `settings` checks of every task's group (grpo: it needs at least one reward)."""

    def for_model(self, model, given: Mapping[str, Any]) -> Task:
        """The task as it trains `model`, with its `settings_group` `given`: itself, or (a task with state of
        its own in a run, dpo's reference model) a copy bound to the model."""
        return self

    def for_evaluation(self, model, state: Mapping[str, Any] | None, reference=None) -> Task:
        """The task as evaluate.py scores `model` with, from the checkpoint's `state` (`run_state()` as
        saved) and a `reference` model (evaluate.py's reference=, task=dpo only); ValueError when they do
        not fit."""
        if reference is not None:
            raise ValueError(f"reference= applies to task=dpo checkpoints (the model a preference run "
                             f"started from); this checkpoint holds a model for task={self.name}: drop "
                             "reference=")
        return self

    # ------------------------------------------------------------- a bound task's state in a run
    def before_fit(self, datamodule, resuming: bool) -> None:
        """Work of the task bound to a model once before its first step, on the device and in the run's
        precision (dpo.reference=precomputed: the reference log-probs); `resuming`: the state comes from the
        checkpoint instead (`load_run_state`)."""

    def run_state(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of the bound task (under `task_state`) for a resume; None: nothing."""
        return None

    def load_run_state(self, state: Mapping[str, Any] | None) -> None:
        """Take back a resumed checkpoint's `run_state()` (None when it holds none)."""

    def check_resumed(self, checkpoint: Mapping[str, Any], given: Mapping[str, Any]) -> None:
        """Raise ValueError, before any data is read, when a checkpoint cannot be resumed with this task's
        settings `given` (dpo.reference=precomputed from a checkpoint that holds no reference log-probs)."""

    def with_epoch(self, data_cfg: dict[str, Any], examples_per_eval: int) -> dict[str, Any]:
        """`data_cfg` with the epoch length the data module needs; a finite data set's epoch is one pass."""
        return data_cfg

    def model_config(self, cfg: ModelConfig, tokenizer) -> ModelConfig:
        """`cfg` completed by the data: vocabulary size and special token ids from the tokenizer."""
        return dataclasses.replace(cfg, **model_overrides(tokenizer))

    def check_tokenizer(self, tokenizer) -> None:
        """Raise ValueError, before any text is encoded, when the tokenizer lacks a special token this task's
        data needs (`needed_specials`: mlm a mask token, seq2seq an eos, classification a cls or bos)."""
        for roles in self.needed_specials:
            if all(tokenizer.specials[role] is None for role in roles):
                have = {role: token for role, token in tokenizer.specials.tokens.items() if token is not None}
                raise ValueError(f"task={self.name} needs a {' or '.join(roles)} token, but the tokenizer "
                                 f"({tokenizer!r}) has none; its special tokens: {have}")

    # --------------------------------------------------------------------------------- data
    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> ZooDataModule:
        """The data module over a cache entry (`entry.tokenizer`, `.arrays`, `.manifest`); `loader` holds
        data.blocks_per_epoch / data.mask_prob, `common` batch_size, max_seq_len, seed, num_workers."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------ training
    def prepare_batch(self, batch: Mapping[str, Any], step: int, training: bool) -> Mapping[str, Any]:
        """The batch a step runs on, from the one the data gave (default: it; grpo: the prompts with their
        sampled and scored completions). `step`: the optimizer steps done; `training`: False in validation."""
        return batch

    def model_inputs(self, batch: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """The keyword arguments the model is called with on a batch (default: the whole batch)."""
        return batch

    def counted_labels(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Number of positions `loss` averages over (the weight of this batch's loss)."""
        return (batch["labels"] != IGNORE_INDEX).sum()

    def loss(self, out: ModelOutput, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The batch's mean loss over its `counted_labels` positions: logged as val/loss (default: the model's
        own, computed from `labels`)."""
        return out.loss

    def training_loss(self, out: ModelOutput, batch: Mapping[str, torch.Tensor],
                      label_smoothing: float) -> torch.Tensor:
        """The loss to minimise: `loss` (check_label_smoothing refuses smoothing where unsupported)."""
        return self.loss(out, batch)

    def next_token_targets(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(B, T): the next token of each input position, -100 where none is trained (tasks with
        `next_tokens`; model.mtp's modules predict the ones after it)."""
        raise NotImplementedError(f"task {self.name} has no next-token targets")

    def loss_from_hidden(self, hidden: torch.Tensor, head, batch: Mapping[str, torch.Tensor],
                         chunk_size: int) -> torch.Tensor:
        """`loss` from the model's final hidden states (forward with skip_head=True), `head` applied to
        `chunk_size` positions at a time so the (B, T, V) logits never exist (tasks with `chunked_loss`)."""
        raise NotImplementedError(f"task {self.name} computes its loss from logits only")

    def train_logs(self, out: ModelOutput, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Values logged as train/<name> at a training step besides the loss (default: none)."""
        return {}

    def val_metrics(self, label_names: Sequence[str] = ()) -> dict[str, Metric]:
        """Validation metrics besides the loss, logged as val/<name>; each takes update(out, batch).
        `label_names`: the data's class / tag names (the tokenizer's), for metrics that name what they count;
        left empty where only the metrics' names are wanted."""
        return {}

    # ------------------------------------------------------------------------------- outputs
    def references(self, model, tokenizer, datamodule, n: int) -> tuple[list[str], list[str]]:
        """The model's outputs and the reference texts for the first `n` validation examples
        (tasks with `has_references`)."""
        raise NotImplementedError(f"task {self.name} has no reference texts")

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """What the trained model produces (cfg: callbacks.samples options); called in eval mode."""
        raise NotImplementedError

    def evaluate(self, model, tokenizer, datamodule, split: str, options: EvalOptions) -> dict[str, float]:
        """This task's metrics of `model` on a data split ("val" or "test"): evaluate.py and the test split
        at the end of training (zoo/evaluation)."""
        raise NotImplementedError


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: register one instance of `cls` in TASKS under `cls.name`."""
    TASKS.register(cls.name, cls())
    return cls


def all_tasks() -> list[Task]:
    return [TASKS.get(name) for name in TASKS.names()]


def get_task(task: Task | str) -> Task:
    """A Task, given one or its registered name (unknown names raise with the known ones)."""
    return task if isinstance(task, Task) else TASKS.get(task)


def check_task_settings(resolved: Mapping[str, Any], task: Task) -> None:
    """Every task's settings group checked by the task; one that differs from its defaults (set on the
    command line) while another task trains is refused, naming the task that reads it."""
    for other in all_tasks():
        group = other.settings_group
        if group is None:
            continue
        settings = other.settings(resolved.get(group) or {})
        if other is not task and settings != other.settings({}):
            raise ValueError(f"{group}.* applies to task={other.name} only, not task={task.name}; "
                             f"leave the {group} keys at their defaults (conf/config.yaml)")


def default_task(cfg: ModelConfig) -> Task:
    """The task task=auto trains for `cfg`; ValueError when none does."""
    found = [t for t in all_tasks() if t.is_default_for(cfg)]
    if len(found) == 1:
        return found[0]
    if found:  # a registry mistake, not a user's
        raise ValueError(f"tasks {[t.name for t in found]} all claim model.arch={cfg.arch} with "
                         f"model.head={cfg.head.name} for task=auto; set auto = False on all but one")
    check_config(labels_to_come(cfg))  # an unknown arch or a head the arch cannot carry says so itself
    raise ValueError(f"task=auto: no task trains model.arch={cfg.arch} with model.head={cfg.head.name} "
                     f"by default; name one: task={'|'.join(TASKS.names())}")


class StreamTask(Task):
    """A task over one token stream cut into windows (lm, mlm): text data and no natural epoch."""

    corpus_kind = "text"
    user_data = "data=text data.files=..."
    needed_specials = (("eos", "sep"),)  # ends each document of the stream

    def with_epoch(self, data_cfg: dict[str, Any], examples_per_eval: int) -> dict[str, Any]:
        """One epoch = one evaluation interval (unless data.blocks_per_epoch is given): validation and
        checkpoints land on epoch ends, so a resumed run restarts exactly where the checkpoint was taken."""
        if data_cfg.get("blocks_per_epoch") is not None:
            return data_cfg
        return {**data_cfg, "blocks_per_epoch": examples_per_eval}

    @staticmethod
    def streams(entry) -> dict[str, Any]:
        """split -> the cache entry's flat token ids of that split."""
        return {split: entry.arrays[f"{split}.tokens"].ids for split in ("train", "val")}


def labels_to_come(cfg: ModelConfig) -> ModelConfig:
    """`cfg` with 1 standing in for a num_labels the data has yet to set (0), on a head that reads it; other
    heads (lm, qa, ...) have no num_labels and are returned as they are."""
    return cfg.with_head(num_labels=1) if getattr(cfg.head, "num_labels", None) == 0 else cfg


class LabelledTask(Task):
    """A task whose data names its labels (classification's classes, token classification's tags: the
    tokenizer's `label_names`) and so sets model.head.num_labels."""

    label_kind = "labels"  # what the data's labels are called in errors

    def check_model(self, cfg: ModelConfig) -> None:
        """model.head.num_labels may still be 0: the data gives it (model_config); the rest is checked now."""
        super().check_model(labels_to_come(cfg))

    def model_config(self, cfg: ModelConfig, tokenizer) -> ModelConfig:
        """num_labels from the data's label names; a num_labels the user set must match them."""
        found = len(tokenizer.label_names)
        if cfg.head.num_labels and cfg.head.num_labels != found:
            raise ValueError(f"model.head.num_labels={cfg.head.num_labels} but the data has {found} "
                             f"{self.label_kind} {tokenizer.label_names}; leave model.head.num_labels unset "
                             "(the data sets it)")
        return super().model_config(cfg.with_head(num_labels=found), tokenizer)
