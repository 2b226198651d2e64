"""The keys of `conf/config.yaml` outside model/data/trainer/scheduler, and the values each accepts:
top-level keys, optim (declared in optim.py), compile, paths, logger (each logger's keyword parameters),
tokenizer (each tokenizer's keyword parameters) and callbacks (declared here per callback name).
`plan.prepare` calls `check_config` before anything is built; errors are ValueError naming key and value."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from zoo.generation.config import GENERATION_OPTIONS as DECODING
from zoo.options import (
    BOOL,
    MAPPING,
    TEXT,
    Options,
    Rule,
    check_entry,
    integer,
    list_of,
    number,
    one_of,
    optional,
)
from zoo.registry import unknown_choice_message
from zoo.tokenizers import validate_tokenizer_cfg
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
    "init_from": optional(TEXT),  # checked by zoo.finetune (plan.prepare): a HF folder, zoo .ckpt or export
    "finetune": optional(MAPPING),  # full | lora | freeze: keys checked by zoo.finetune.check_finetune
    **{group: MAPPING for group in GROUPS},
}, required=frozenset(GROUPS))
MEMORY_OPTIONS = Options({"activation_checkpointing": BOOL, "loss_chunk_size": optional(integer(1))})
PATHS_OPTIONS = Options({"log_dir": TEXT, "runs_dir": TEXT, "output_dir": TEXT, "cache_dir": optional(TEXT)})
ENABLED = {"enabled": BOOL}  # every callback may be switched off with enabled: false
# callbacks.<name>.* keys per registered callback (zoo.training.callbacks.CALLBACKS); tests keep the names in
# step with the callbacks' constructors.
CALLBACK_OPTIONS: dict[str, Options] = {
    "progress_bar": Options({"refresh_rate": integer(0), "leave": BOOL,
                             "style": one_of("auto", "bar", "lines"), "every_n_steps": integer(1)}),
    "checkpoint": Options({"monitor": TEXT, "mode": one_of("min", "max"), "save_top_k": integer(-1),
                           "save_last": BOOL}),
    "tokens_per_s": Options({"window": integer(1)}),
    "non_finite": Options({}),
    "exact_match": Options({"max_examples": integer(1)}),
    # the keys that decode have the library's rules (zoo.generation.config.GENERATION_OPTIONS)
    "test": DECODING.only("num_beams", "length_penalty").extended({"max_examples": optional(integer(1))}),
    "samples": DECODING.only("max_new_tokens", "temperature", "top_k").extended({
        "prompts": list_of(TEXT), "seed": integer(0), "num_shown": integer(0), "max_examples": integer(1)}),
    "attention_maps": Options({"every_n_epochs": integer(1), "max_tokens": integer(1),
                               "max_heads": optional(integer(1)), "layers": optional(list_of(integer(0))),
                               "model_attr": TEXT, "dirname": TEXT}),
}


@functools.cache
def compile_options() -> Options:
    """compile.*: the backends and modes this torch build knows (listed on first use: imports dynamo)."""
    import torch._dynamo
    import torch._inductor

    backends = torch._dynamo.list_backends(exclude_tags=())  # debug backends too: eager, aot_eager
    enabled = Rule(lambda v: isinstance(v, bool) or v == "auto", "true, false or auto")  # auto: compiling.py
    return Options({"enabled": enabled, "backend": one_of(*sorted(backends)),
                    "mode": optional(one_of(*torch._inductor.list_mode_options()))})


def check_callbacks(cfg: Mapping[str, Any] | None) -> None:
    """Every callback name registered, its options declared and allowed; `null` switches one off."""
    for name, opts in (cfg or {}).items():
        if name not in CALLBACK_OPTIONS:
            raise ValueError("callbacks: " + unknown_choice_message("callback", name, list(CALLBACK_OPTIONS)))
        if opts is not None:
            MAPPING.check(f"callbacks.{name}", opts)
            CALLBACK_OPTIONS[name].extended(ENABLED).check(f"callbacks.{name}", opts)


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
