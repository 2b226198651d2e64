"""The `callbacks.<name>.*` keys: each callback's options and their defaults, declared once, and the
checks and Hydra nodes made from them. Light on purpose (no Lightning, no task code): train.py composes its
config, and `--help` shows it, from these declarations before the training stack is imported. The
callbacks themselves, registered under the same names, are in zoo.training.callbacks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.generation.config import GENERATION_OPTIONS as DECODING
from zoo.options import BOOL, MAPPING, TEXT, Options, declared, integer, list_of, one_of, optional
from zoo.registry import unknown_choice_message
from zoo.training.monitor import switched_on

ENABLED = {"enabled": BOOL}  # every callback may be switched off with enabled: false

# train.py's `callbacks: default` (conf/callbacks/default.yaml) switches every one on but attention_maps
# (opt-in: callbacks=with_attention_maps). The defaults below are the only ones: a builder gets every key
# (`callback_settings` fills what was not given), conf/callbacks YAML repeats no other value.
CALLBACK_OPTIONS: dict[str, Options] = {
    # rich bar: step, loss, tok/s, val_loss
    "progress_bar": declared(
        refresh_rate=(integer(0), 5),  # redraw every 5 steps: each redraw costs a few % of a small CPU step
        leave=(BOOL, False),
        style=(one_of("auto", "bar", "lines"), "auto"),  # auto: the bar in a terminal, else lines (logs, CI)
        every_n_steps=(integer(1), 50)),  # lines: step, loss, tok/s, elapsed, ETA every n optimizer steps
    # <run>/checkpoints/last.ckpt (each validation + end of fit), best.ckpt (best finite monitored value);
    # monitor: any metric logged at validation, e.g. val/bleu with mode max (seq2seq)
    "checkpoint": declared(monitor=(TEXT, "val/loss"), mode=(one_of("min", "max"), "min"),
                           save_top_k=(integer(-1), 1), save_last=(BOOL, True)),
    "tokens_per_s": declared(window=(integer(1), 10)),  # train/tokens_per_s over the last `window` batches
    "non_finite": Options({}),
    "exact_match": declared(max_examples=(integer(1), 200)),  # validation examples decoded and scored
    # at the end: print generated samples, log a table; the keys that decode have the library's rules
    # (zoo.generation.config.GENERATION_OPTIONS) and these defaults
    "samples": DECODING.only("max_new_tokens", "temperature", "top_k").defaulting(
        max_new_tokens=64, temperature=0.8, top_k=40).extended(declared(
            # task=lm: continued, seeded per prompt
            prompts=(list_of(TEXT), ["def ", "import os\n", "class "]),
            seed=(integer(0), 0), num_shown=(integer(0), 5),
            max_examples=(integer(1), 500))),  # seq2seq: held-out test pairs translated for test/exact_match
    # task=grpo: every n optimizer steps, a table of the latest generation batch's completions (prompt,
    # completion, each reward, reward, advantage) to the loggers that take tables (W&B)
    "rollouts": declared(every_n_steps=(integer(1), 50), num_shown=(integer(1), 16)),
    # at the end, when the data has a test split: test/<metric> of best.ckpt (docs/evaluation.md)
    "test": DECODING.only("num_beams", "length_penalty").extended(
        declared(max_examples=(optional(integer(1)), None))),  # null: the whole test split
    # the attention maps of one fixed validation example at every validation (PNGs in the run folder, W&B)
    "attention_maps": declared(
        every_n_epochs=(integer(1), 1), max_tokens=(integer(1), 24), max_heads=(optional(integer(1)), 8),
        layers=(optional(list_of(integer(0))), None), model_attr=(TEXT, "model"),
        dirname=(TEXT, "attention_maps")),
}


def check_callbacks(cfg: Mapping[str, Any] | None) -> None:
    """Every callback name registered, its options declared and allowed; `null` switches one off. One
    ValueError naming `callbacks.<name>.<key>`."""
    for name, opts in (cfg or {}).items():
        if name not in CALLBACK_OPTIONS:
            known = sorted(CALLBACK_OPTIONS)
            raise ValueError("callbacks: " + unknown_choice_message("callback", name, known))
        if opts is not None:
            MAPPING.check(f"callbacks.{name}", opts)
            CALLBACK_OPTIONS[name].extended(ENABLED).check(f"callbacks.{name}", opts)


def callback_settings(cfg: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """`callbacks: {name: options}` -> each switched-on callback's options with its declared defaults
    filled in (`enabled` dropped): what its builder gets, from Hydra or from a library user alike (checked
    first, so a library user without Hydra gets the same errors as train.py)."""
    check_callbacks(cfg)
    return {name: CALLBACK_OPTIONS[name].filled({k: v for k, v in (opts or {}).items() if k != "enabled"})
            for name, opts in (cfg or {}).items() if switched_on(cfg, name)}


def register_callback_configs() -> None:
    """The declared defaults as Hydra config nodes, which conf/callbacks/*.yaml compose from (so that
    `callbacks.checkpoint.mode=max` overrides a key that exists): `callbacks/_declared` holds every
    declared callback with its defaults, `callbacks/_declared/<name>` one of them (a YAML switching an
    opt-in one on: `- _declared/attention_maps@attention_maps`)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    declared_now = {name: dict(options.defaults) for name, options in CALLBACK_OPTIONS.items()}
    store.store(group="callbacks", name="_declared", node=declared_now)
    for name, defaults in declared_now.items():
        store.store(group="callbacks/_declared", name=name, node=defaults)
