"""The config train.py composes under @hydra.main, with HydraConfig set as @hydra.main sets it (init_from
reads from it which model.* and tokenizer keys the command line gave): for runs tests start in-process."""

from __future__ import annotations

from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"


def compose_as_train(overrides: list[str]):
    """conf/config.yaml composed with `overrides` from the nodes train.py registers, HydraConfig set, the
    `hydra` node removed; call `release_hydra_config()` when the run is over."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from zoo.hydra_schema import part_overrides
    from zoo.training.hydra_configs import register_train_configs

    register_train_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):  # as train.py's command line reads
        cfg = compose("config", overrides=part_overrides(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def release_hydra_config() -> None:
    """Forget the HydraConfig `compose_as_train` set (a later test composes its own)."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None
