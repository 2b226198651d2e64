"""The training app: a LightningModule around any zoo model, optimizers and schedules, loggers (W&B by
default, offline when there is no key or network), callbacks, precision by hardware and the run
orchestration behind `train.py`. See docs/training.md. Importing it registers nothing: the app that composes
the train config calls `zoo.training.hydra_configs.register_train_configs()`."""
