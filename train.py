"""Train any zoo model: `python train.py model=gpt_small` (see docs/training.md for every option)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from
SCRIPT = False  # True when train.py is the process's script (below): its import heap is then frozen


def _overrides() -> list[str]:
    """The command line's key=value overrides (repeated in the summary's resume command)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # no Hydra run (called directly)
        return []


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    # the training stack (Lightning, W&B, the tasks) loads once there is a run: `--help` needs none of it
    from zoo.training.heap import imports_frozen

    with imports_frozen(SCRIPT):  # the heap is the process's to freeze only when train.py is its script
        from lightning.pytorch.utilities import rank_zero_only

        from zoo.apps import ConfigError
        from zoo.training.callbacks import NonFiniteLossError
        from zoo.training.console import quiet_third_party, summary_lines
        from zoo.training.run import train

    quiet_third_party()
    try:
        result = train(cfg)
    except (ConfigError, NonFiniteLossError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    if rank_zero_only.rank == 0:  # DDP / FSDP: one summary, not one per process
        print("\n".join(summary_lines(result, _overrides())))
        for name in sorted(result.metrics):
            print(f"  {name} = {result.metrics[name]:.4f}")
    return result.metrics.get("val/loss")  # the value a Hydra sweeper would minimise


def cli() -> None:
    """The script: ckpt_path= and init_from= as the shell gave them (`ckpt_path=.../epoch=1-step=9.ckpt`),
    then Hydra; what it quotes stays quoted in the summary's resume line (quoting again changes nothing)."""
    from zoo.apps import literal_overrides
    from zoo.config_moved import moved_override
    from zoo.hydra_schema import part_overrides

    sys.argv[1:] = part_overrides(literal_overrides(sys.argv[1:], ("ckpt_path", "init_from")))
    moved = moved_override(sys.argv[1:])
    if moved is not None:
        print(f"error: {moved}", file=sys.stderr)
        sys.exit(1)
    main()


if __name__ == "__main__":
    SCRIPT = True
    cli()
