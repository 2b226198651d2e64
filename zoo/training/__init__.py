"""The training app: a LightningModule around any zoo model, optimizers and schedules, loggers (W&B by
default, offline when there is no key or network), callbacks, precision by hardware and the run
orchestration behind `train.py`. See docs/training.md."""

from hydra.core.config_store import ConfigStore

import zoo.hydra_schema  # noqa: F401  (registers model/_schema, which every preset lists)


def register_configs() -> None:
    """`data=auto` (the default): the built-in data for the model's task, chosen in plan.resolve_data."""
    ConfigStore.instance().store(group="data", name="auto", node={"name": "auto"})


register_configs()
