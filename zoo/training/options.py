"""The keys of `conf/config.yaml` outside model/data/trainer/scheduler, and the values each accepts:
top-level keys, optim (declared in optim.py), compile, paths, logger (each logger's keyword parameters),
tokenizer (each tokenizer's keyword parameters) and callbacks (each declares its keys beside its builder).
`plan.prepare` calls `check_config` before anything is built; errors are ValueError naming key and value."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from zoo.options import (
    BOOL,
    MAPPING,
    TEXT,
    Options,
    Rule,
    check_entry,
    integer,
    number,
    one_of,
    optional,
)
from zoo.tokenizers import validate_tokenizer_cfg
from zoo.training.callback_options import check_callbacks
from zoo.training.loggers import LOGGERS, logger_options
from zoo.training.optim import check_optim

GROUPS = ("model", "data", "tokenizer", "scheduler", "trainer", "logger", "paths", "optim", "compile")
TOP_LEVEL = Options({
    "task": TEXT,  # the choice is checked by plan.resolve_task
    "seed": integer(0, 2**32 - 1),
    "batch_size": integer(1),
    "eval_every": integer(1),
    "ckpt_path": optional(TEXT),
    "label_smoothing": number(0, 1, high_open=True),
    "name": TEXT,
    "callbacks": optional(MAPPING),
    "memory": optional(MAPPING),
    "dpo": optional(MAPPING),  # task=dpo's settings: checked by the task (zoo.tasks.check_task_settings)
    "grpo": optional(MAPPING),  # task=grpo's settings: checked by the task, as dpo's
    "init_from": optional(TEXT),  # checked by zoo.finetune (plan.prepare): a HF folder, zoo .ckpt or export
    "finetune": optional(MAPPING),  # full | lora | freeze: keys checked by zoo.finetune.check_finetune
    **{group: MAPPING for group in GROUPS},
}, required=frozenset(GROUPS))
MEMORY_OPTIONS = Options({"activation_checkpointing": BOOL, "loss_chunk_size": optional(integer(1))})
PATHS_OPTIONS = Options({"log_dir": TEXT, "runs_dir": TEXT, "output_dir": TEXT, "cache_dir": optional(TEXT)})


@functools.cache
def compile_options() -> Options:
    """compile.*: the backends and modes this torch build knows. torch.compile's default backend passes
    as it is; any other name is looked up in the list of backends (listing imports every backend module and
    scans the installed packages' entry points: ~0.2 s CPU, which a run with the default does not pay)."""
    import torch._dynamo
    import torch._inductor

    from zoo.training.compiling import DEFAULT_BACKEND

    def backends() -> list[str]:
        return sorted(torch._dynamo.list_backends(exclude_tags=()))  # debug backends too: eager, aot_eager

    def known(value: Any) -> bool:
        return value == DEFAULT_BACKEND or one_of(*backends()).test(value)

    backend = Rule(known, "a torch.compile backend",
                   lambda key, value: f"{key} must be {one_of(*backends()).allowed}, got {value!r}")
    enabled = Rule(lambda v: isinstance(v, bool) or v == "auto", "true, false or auto")  # auto: compiling.py
    return Options({"enabled": enabled, "backend": backend,
                    "mode": optional(one_of(*torch._inductor.list_mode_options()))})


# top-level group -> its check; model, data, trainer and scheduler are checked by plan.prepare (they depend
# on each other: the task follows the model, the data follows the task, the schedule needs max_steps).
GROUP_CHECKS: dict[str, Callable[[Any], None]] = {
    "optim": check_optim,  # the optimizer registry declares its keys
    "compile": lambda cfg: compile_options().check("compile", cfg),
    "paths": lambda cfg: PATHS_OPTIONS.check("paths", cfg),
    "memory": lambda cfg: MEMORY_OPTIONS.check("memory", cfg or {}),
    "logger": lambda cfg: check_entry("logger", cfg.get("name"), cfg, logger_options, LOGGERS),
    "tokenizer": validate_tokenizer_cfg,  # its builder's keyword parameters (did-you-mean), its own checks
    "callbacks": check_callbacks,
}


def check_config(resolved: Mapping[str, Any]) -> None:
    """Top-level keys and values, then every group in GROUP_CHECKS; raises ValueError."""
    TOP_LEVEL.check("", resolved)
    for group, check in GROUP_CHECKS.items():
        check(resolved.get(group))
