"""Evaluation app: the run behind `evaluate.py` (`zoo.evaluation.run.evaluate`); the test split at the end of
training is a training callback (zoo.training.final_evaluation). The metrics are each task's own
(`Task.evaluate`, zoo/tasks/, with zoo.tasks.metrics and zoo.tasks.evaluating)."""
