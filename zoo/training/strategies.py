"""The trainer.strategy names zoo resolves to its own strategies (`fsdp`: zoo.training.sharding, `fsdp_tp`:
zoo.training.tensor_parallel; the rest are Lightning's names), the trainer.* keys they read, and the checks
of a run's options and resumed checkpoint against them, made before any process starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.training.sharding import FSDPStrategy
from zoo.training.tensor_parallel import FSDPTPStrategy

STRATEGIES: dict[str, type[FSDPStrategy]] = {"fsdp": FSDPStrategy, "fsdp_tp": FSDPTPStrategy}

# trainer.* keys zoo's strategies read (not lightning.Trainer's) -> the strategies that read each
ZOO_TRAINER_KEYS: dict[str, tuple[str, ...]] = {
    "sharded_checkpoint": ("fsdp", "fsdp_tp"),
    "tp_size": ("fsdp_tp",),
}


def strategy_class(trainer_cfg: dict[str, Any]) -> type[FSDPStrategy] | None:
    """zoo's strategy class for trainer.strategy, None for Lightning's own names."""
    return STRATEGIES.get(str(trainer_cfg.get("strategy")))


def trainer_arguments(trainer_kwargs: dict[str, Any]) -> dict[str, Any]:
    """trainer.* as lightning.Trainer takes it: zoo's strategy object (with its keys) for the names zoo
    owns, Lightning's names unchanged."""
    kwargs = {k: v for k, v in trainer_kwargs.items() if k not in ZOO_TRAINER_KEYS}
    name = kwargs.get("strategy", "auto")
    if isinstance(name, str) and name in STRATEGIES:
        own = {k: trainer_kwargs[k] for k, readers in ZOO_TRAINER_KEYS.items()
               if name in readers and k in trainer_kwargs}
        kwargs["strategy"] = STRATEGIES[name](**own)
    return kwargs


def checkpoint_layout(trainer_cfg: dict[str, Any]) -> str | None:
    """The tensor layout this run's checkpoints hold ("unfused" under tensor parallelism, None: fused)."""
    strategy = strategy_class(trainer_cfg)
    return strategy.layout if strategy is not None else None


def data_parallel_size(trainer_cfg: dict[str, Any], world: int) -> int:
    """How many of the run's `world` processes read different batches (tensor-parallel groups share one)."""
    strategy = strategy_class(trainer_cfg)
    return world if strategy is None else strategy.data_parallel_size(trainer_cfg, world)


def check_resume(ckpt: Path | None, trainer_cfg: dict[str, Any]) -> None:
    """A sharded checkpoint (a folder of shards) resumes under a zoo strategy, which reshards it to its own
    world size; ValueError for another strategy (its optimizer state is keyed for sharded parameters)."""
    from zoo.checkpoint import is_sharded

    if ckpt is not None and is_sharded(ckpt) and strategy_class(trainer_cfg) is None:
        raise ValueError(f"{ckpt} is a sharded checkpoint (a folder of shards): resume it with trainer=fsdp "
                         "(any trainer.devices, 1 included; trainer=fsdp_tp for a tensor-parallel run's); "
                         "for its weights alone, python -m zoo.training.consolidate makes one file")


def check_resumed_layout(saved: str | None, trainer_cfg: dict[str, Any], path: str | Path) -> None:
    """A checkpoint resumes only under a strategy holding its tensor layout (the optimizer state is keyed by
    the parameters): ValueError naming both strategies otherwise."""
    wanted = checkpoint_layout(trainer_cfg)
    if saved == wanted:
        return
    written = "trainer.strategy=fsdp_tp (tensor parallel: q/k/v and gate/value unfused)" if saved else \
        "a strategy other than fsdp_tp (fused q/k/v)"
    raise ValueError(f"checkpoint {path} was written by {written} and this run is trainer.strategy="
                     f"{trainer_cfg.get('strategy')}: resume it with the strategy that wrote it; for its "
                     "weights alone, start a new run with init_from=<the checkpoint> (python -m "
                     "zoo.training.consolidate makes a sharded folder one file)")


def check_strategy(resolved: dict[str, Any], model_cfg, world: int) -> None:
    """A zoo strategy checks the run's options it depends on (`model_cfg`: the run's model config, over
    `world` processes); its keys need it (ValueError naming them)."""
    trainer = resolved["trainer"]
    name = str(trainer.get("strategy"))
    for key, readers in ZOO_TRAINER_KEYS.items():
        if trainer.get(key) and name not in readers:
            raise ValueError(f"trainer.{key} applies to trainer.strategy={'|'.join(readers)} (e.g. "
                             f"trainer={readers[0]}), not trainer.strategy={name}")
    strategy = strategy_class(trainer)
    if strategy is not None:
        strategy.check_config(resolved, model_cfg, world)
