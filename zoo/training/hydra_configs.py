"""What train.py composes `conf/config.yaml` from, stored in Hydra's ConfigStore when the app that composes
calls `register_train_configs()` (train.py at start-up; tests and scripts that compose the train config),
never as a side effect of importing zoo.training. Light, like train.py's `--help`: no Lightning, no tasks."""

from __future__ import annotations

from zoo.hydra_schema import register_schemas
from zoo.training.callback_options import register_callback_configs


def register_train_configs() -> None:
    """`model/_schema` and `data/auto` (zoo.hydra_schema), `callbacks/_declared` (each callback's declared
    defaults, which conf/callbacks composes from). Registering again replaces them with the same nodes."""
    register_schemas()
    register_callback_configs()
