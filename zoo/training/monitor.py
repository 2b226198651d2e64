"""Which metrics a training run logs, named before it starts, so that `callbacks.checkpoint.monitor` (the
metric best.ckpt follows) is checked in `plan.prepare`: a name that is never logged would leave best.ckpt
unwritten, or Lightning would stop at the first validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zoo.utils import did_you_mean

if TYPE_CHECKING:  # annotations only: train.py composes its config (callback_options) without task code
    from zoo.tasks import Task


def switched_on(callbacks: Mapping[str, Any], name: str) -> bool:
    """Whether `callbacks.<name>` is on: present, not `null` and not `enabled: false`."""
    opts = callbacks.get(name)
    return opts is not None and not (isinstance(opts, Mapping) and opts.get("enabled") is False)


def reference_metric_names(task: Task) -> list[str]:
    """What the exact_match callback logs for `task` at each validation (tasks with reference texts)."""
    return [f"val/{name}" for name in task.reference_metrics] if task.has_references else []


def monitorable_metrics(task: Task, callbacks: Mapping[str, Any] | None) -> list[str]:
    """Every metric logged at each validation, which ModelCheckpoint can follow: the validation loss (and
    perplexity), the task's validation metrics and the reference metrics when their callback is on. (Training
    values are left out: they are logged only every trainer.log_every_n_steps steps, so a validation may
    come before the first of them.)"""
    callbacks = callbacks or {}
    names = ["val/loss", *(["val/ppl"] if task.perplexity else []), *(f"val/{n}" for n in task.val_metrics())]
    if switched_on(callbacks, "exact_match"):
        names += reference_metric_names(task)
    return names


def check_monitor(callbacks: Mapping[str, Any] | None, task: Task) -> None:
    """Raise ValueError when callbacks.checkpoint.monitor names a metric this run never logs."""
    callbacks = callbacks or {}
    if not switched_on(callbacks, "checkpoint"):
        return
    monitor = (callbacks.get("checkpoint") or {}).get("monitor", "val/loss")
    allowed = monitorable_metrics(task, callbacks)
    if monitor in allowed:
        return
    if monitor in reference_metric_names(task):
        raise ValueError(f"callbacks.checkpoint.monitor={monitor} is logged by the exact_match callback, "
                         "which is switched off; switch it on (callbacks.exact_match.max_examples=200) or "
                         f"monitor one of: {', '.join(allowed)}")
    raise ValueError(f"callbacks.checkpoint.monitor={monitor} is never logged by task={task.name}."
                     f"{did_you_mean(monitor, allowed)} Logged at validation: {', '.join(allowed)}")
