"""Evaluation apps: the run behind `evaluate.py` (`zoo.evaluation.run.evaluate`) and the test split at the
end of training (`zoo.evaluation.callback`). The metrics are each task's own (`Task.evaluate`, zoo/tasks/,
with zoo.tasks.metrics and zoo.tasks.evaluating)."""
