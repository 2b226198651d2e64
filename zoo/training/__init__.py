"""The training app: a LightningModule around any zoo model, optimizers and schedules, loggers (W&B by
default, offline when there is no key or network), callbacks, precision by hardware and the run
orchestration behind `train.py`. See docs/training.md."""

import zoo.hydra_schema  # noqa: F401  (registers model/_schema and data/auto, which train.py composes from)
from zoo.training.callback_options import register_callback_configs

register_callback_configs()  # callbacks/_declared: the declared defaults conf/callbacks composes from
