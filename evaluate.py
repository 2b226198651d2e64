"""Evaluate a checkpoint: `python evaluate.py ckpt=<run>/checkpoints/best.ckpt [data=...] [split=test]`
prints the task's metrics (perplexity and bits per byte, masked-token accuracy, BLEU / chrF / exact match,
accuracy / macro-F1) and writes them as JSON. See docs/evaluation.md."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

import zoo.hydra_schema  # noqa: F401  (registers Hydra configs: data/auto)
from zoo.apps import ConfigError, literal_overrides

SCRIPT = False  # True when evaluate.py is the process's script (below): its import heap is then frozen


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    # the evaluation stack (Lightning and torchmetrics, through zoo.tasks) loads once there is a run: `--help`
    # needs none of it
    from zoo.training.heap import imports_frozen

    with imports_frozen(SCRIPT):  # the heap is the process's to freeze only when evaluate.py is its script
        from rich.console import Console

        from zoo.evaluation.run import evaluate, report_table

    try:
        report = evaluate(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    Console().print(report_table(report))
    if cfg.output:
        print(f"metrics written to {cfg.output}")


def cli() -> None:
    """The script: ckpt= and output= as the shell gave them (`ckpt=.../epoch=1-step=9.ckpt`), then Hydra."""
    sys.argv[1:] = literal_overrides(sys.argv[1:], ("ckpt", "output"))
    main()


if __name__ == "__main__":
    SCRIPT = True
    cli()
