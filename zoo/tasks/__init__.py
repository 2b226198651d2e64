"""Training tasks, one file each, registered in TASKS: lm, mlm, seq2seq, classification, token_classification,
question_answering, sft, dpo, grpo. See base.py for what a task answers; `get_task(name)` and
`default_task(model_cfg)` (task=auto) pick one; `build_data(data_cfg, tokenizer_cfg, task=...)` reads a task's
data."""

from zoo.tasks import (  # noqa: F401  (each registers its task)
    classification,
    dpo,
    grpo,
    lm,
    mlm,
    question_answering,
    seq2seq,
    sft,
    token_classification,
)
from zoo.tasks.base import (
    TASKS,
    StreamTask,
    Task,
    all_tasks,
    check_task_settings,
    default_task,
    get_task,
    register,
)
from zoo.tasks.data import build_data

__all__ = ["TASKS", "StreamTask", "Task", "all_tasks", "build_data", "check_task_settings", "default_task",
           "get_task", "register"]
