"""Evaluation: each task's metrics on a data split (`Task.evaluate`, zoo/tasks/), the metric functions
they use (`zoo.evaluation.metrics`), and the run behind `evaluate.py` (`zoo.evaluation.run.evaluate`).
Nothing here imports zoo.tasks at import time: the tasks import these helpers."""

from zoo.evaluation.loop import EvalOptions, available_splits, resolve_split
from zoo.evaluation.metrics import TokenNLL, accuracy, bleu, chrf, exact_match, macro_f1

__all__ = ["EvalOptions", "TokenNLL", "accuracy", "available_splits", "bleu", "chrf", "exact_match", "macro_f1",
           "resolve_split"]
