"""Training tasks, one file each, registered in TASKS: lm, mlm, seq2seq, classification, token_classification,
question_answering. See base.py for what a task answers; `get_task(name)` and `default_task(model_cfg)`
(task=auto) pick one."""

from zoo.tasks import (  # noqa: F401  (each registers its task)
    classification,
    lm,
    mlm,
    question_answering,
    seq2seq,
    token_classification,
)
from zoo.tasks.base import TASKS, StreamTask, Task, all_tasks, default_task, get_task, register

__all__ = ["TASKS", "StreamTask", "Task", "all_tasks", "default_task", "get_task", "register"]
