"""Fully-sharded data parallel (FSDP2, `torch.distributed.fsdp.fully_shard`) for zoo models, through
Lightning's ModelParallelStrategy: the strategy Lightning maintains for FSDP2 (its FSDPStrategy wraps the
older FullyShardedDataParallel class). `trainer.strategy=fsdp` selects it (zoo.training.plan); the training
module's `configure_model` asks the strategy to shard the model once the processes have started.

One shard unit per Block (its parameters are gathered for its forward and backward only), then one for the
root: embeddings, final norms and the head. An output head tied to the token embedding shares one parameter
with it, so both sit in the root unit and the tie survives sharding. Parameters stay in the model's dtype
(fp32 on CPU); with `bf16-mixed` on GPUs they are gathered in bf16 and gradients reduced in fp32.

Checkpoints are full state dicts gathered on rank 0 (`save_distributed_checkpoint=False`): the same file a
single process writes, so it resumes at any world size and loads with `zoo.load`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn

# optimizers whose update needs whole matrices (a shard of a matrix is not orthogonalised like the matrix)
UNSHARDABLE_OPTIMIZERS = ("muon",)


def float32_units(model: nn.Module) -> list[nn.Module]:
    """The modules that route in float32 in a bf16 model (DeepSeek's routers): FSDP2 wants one dtype in a
    unit, so each is a unit of its own, and is gathered in float32 whatever the policy."""
    from zoo.modules.moe.routers import Router

    return [m for m in model.modules() if isinstance(m, Router) and m.float32]


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules that get their own shard unit, innermost first: the float32 routers, then every Block of
    every Stack."""
    from zoo.modules.block import Stack

    return float32_units(model) + [layer for stack in model.modules() if isinstance(stack, Stack)
                                   for layer in stack.layers]


def fully_shard_model(model: nn.Module, mesh, *, mixed_bf16: bool = False) -> nn.Module:
    """Shard `model` in place over the 1-D data-parallel `mesh`: one unit per float32 router and per Block,
    then the root (which holds the embeddings and the, possibly tied, head). Returns the model (now an
    FSDPModule)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed_bf16
              else MixedPrecisionPolicy())
    float32 = {id(m) for m in float32_units(model)}
    for unit in shard_units(model):
        fully_shard(unit, mesh=mesh, mp_policy=MixedPrecisionPolicy() if id(unit) in float32 else policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


@contextmanager
def gathered(model: nn.Module) -> Iterator[nn.Module]:
    """The root unit's parameters gathered while the block holds: for calls that enter the model elsewhere
    than its forward (generate, encode / decode). Every rank must enter it (it all-gathers); an unsharded
    model passes through."""
    unshard = getattr(model, "unshard", None)
    if unshard is None:
        yield model
        return
    unshard()
    try:
        yield model
    finally:
        model.reshard()


def whole_model(trainer, pl_module) -> nn.Module | None:
    """The model rank zero may run alone after fit: the module's own, or, when the strategy splits the
    parameters across processes (`collective_forward`), a whole copy loaded from the
    last checkpoint (written at the end of fit); None without one."""
    if not getattr(trainer.strategy, "collective_forward", False):
        return pl_module.model
    last = trainer.checkpoint_callback.last_model_path if trainer.checkpoint_callback else ""
    if not last:
        return None
    from zoo.loader import load

    return load(last)[0].to(pl_module.device).eval()


class FSDPStrategy(ModelParallelStrategy):
    """ModelParallelStrategy with a data-parallel mesh over every process (no tensor parallelism) and
    full-state checkpoints. It runs on CPU processes (gloo) as on GPUs (nccl): Lightning's class sets no
    device requirement, so no check is lifted here."""

    collective_forward = True  # every rank must run each forward (generation included): parameters are split

    name = "fsdp"  # its trainer.strategy value
    layout: str | None = None  # its checkpoints' tensor layout (zoo.modules.unfused): fused

    def __init__(self, *, sharded_checkpoint: bool = False, tensor_parallel_size: int = 1, **kwargs: Any
                 ) -> None:
        super().__init__(data_parallel_size="auto", tensor_parallel_size=tensor_parallel_size,
                         save_distributed_checkpoint=sharded_checkpoint, **kwargs)

    def setup_environment(self) -> None:
        # every process is data-parallel but those of one tensor-parallel group (zoo.training.tensor_parallel)
        self._data_parallel_size = self.num_nodes * self.num_processes // self._tensor_parallel_size
        super().setup_environment()

    @staticmethod
    def data_parallel_size(trainer_cfg: dict[str, Any], world: int) -> int:
        """Processes of a `world`-process run that read different batches: all of them."""
        return world

    @classmethod
    def check_config(cls, resolved: dict[str, Any], model_cfg, world: int) -> None:
        """The run's options (`model_cfg`: its model config, over `world` processes) this strategy cannot
        shard: ValueError naming the key (before work starts)."""
        optim = resolved.get("optim") or {}
        if optim.get("name") in UNSHARDABLE_OPTIMIZERS:
            raise ValueError(f"optim.name={optim['name']} orthogonalises whole matrices and "
                             f"trainer.strategy={cls.name} splits them across processes; use "
                             "optim.name=adamw (or trainer=ddp)")

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath, storage_options: Any | None = None
                        ) -> None:
        """Full state (sharded_checkpoint=false): one file, written by rank 0 through the CheckpointIO
        (atomic). Sharded: every rank writes its shards with torch.distributed.checkpoint into one staging
        folder beside the target, rank 0 adds `meta.pt` (the rest of the checkpoint) and publishes the folder
        (zoo.atomic: fsync, rename or swap), so `last.ckpt` is always a whole checkpoint."""
        if not self._save_distributed_checkpoint:
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        import torch.distributed.checkpoint as dcp

        from zoo.atomic import discard, publish_folder, staging_folder
        from zoo.checkpoint import SHARDED_META, atomic_torch_save

        target = Path(self.broadcast(str(filepath)))
        staging = Path(self.broadcast(str(staging_folder(target)) if self.is_global_zero else None))
        tensors = {"state_dict": checkpoint.pop("state_dict")}
        optimizers = checkpoint.pop("optimizer_states", [])
        tensors.update({f"optimizer_{i}": state for i, state in enumerate(optimizers)})  # Lightning's names
        dcp.save(tensors, checkpoint_id=staging)
        if self.is_global_zero:
            atomic_torch_save(checkpoint, staging / SHARDED_META)
            if target.is_file():  # a full-state checkpoint of an earlier run under the same name
                discard(target)
            publish_folder(staging, target)
        self.barrier("sharded_checkpoint_published")

    def parallelize(self, model: nn.Module) -> nn.Module:
        """Shard `model` over the data-parallel mesh (called by the module's configure_model)."""
        mixed = str(self.precision_plugin.precision) == "bf16-mixed"
        return fully_shard_model(model, self.device_mesh["data_parallel"], mixed_bf16=mixed)
