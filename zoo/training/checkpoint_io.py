"""Lightning CheckpointIO that writes atomically (zoo.atomic: temp file + rename) and reads with
weights_only=True, and the sweep of temp files that interrupted checkpoint saves left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.strategies import Strategy

from zoo.atomic import sweep
from zoo.checkpoint import Checkpoint, atomic_torch_save, read_checkpoint

# checkpoints/ sits 1-3 folders below runs_dir: <run>/, runs/<time>/, multiruns/<time>/<job>/.
RUN_DEPTHS = (1, 2, 3)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Saves through `atomic_torch_save`; loads with `read_checkpoint`, except the checkpoint the run already
    read to resume from (`resumed`, see `hand_over`): Lightning gets that as read, not loaded again."""

    resumed: Checkpoint | None = None

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None
                        ) -> dict[str, Any]:
        resumed, self.resumed = self.resumed, None  # handed over once: a later load reads the file as saved
        if resumed is not None and Path(path) == resumed.path:
            return resumed.data
        return read_checkpoint(path)  # weights_only=True, with clear errors


def writes_one_file(strategy: Strategy) -> bool:
    """Whether `strategy` saves a checkpoint as one file through AtomicCheckpointIO (rank 0 writes the full
    state), not a folder of every process's shards (sharded FSDP / model parallel, DeepSpeed)."""
    if not isinstance(strategy.checkpoint_io, AtomicCheckpointIO):
        return False
    if type(strategy).save_checkpoint is Strategy.save_checkpoint:
        return True
    return getattr(strategy, "_save_distributed_checkpoint", None) is False  # zoo's FSDP2, full state


def hand_over(trainer, resumed: Checkpoint | None) -> None:
    """Give the trainer's CheckpointIO the checkpoint the run read to resume from, when its strategy loads
    through it (FSDP and DeepSpeed read the file themselves: they get no copy to hold while training)."""
    io, loads = trainer.strategy.checkpoint_io, type(trainer.strategy).load_checkpoint
    if isinstance(io, AtomicCheckpointIO) and loads is Strategy.load_checkpoint:
        io.resumed = resumed


def remove_stale_checkpoint_temps(runs_dir: Path, output_dir: Path) -> list[Path]:
    """Delete the temp files of checkpoint saves that were killed, in every run's `checkpoints/` under
    `runs_dir` and in this run's: only temps of `*.ckpt`, and only once their writer is gone
    (zoo.atomic.sweep: other runs may be saving there now). Returns what was removed."""
    folders = {output_dir / "checkpoints"}
    for depth in RUN_DEPTHS:
        folders.update(runs_dir.glob("*/" * depth + "checkpoints"))
    return [path for folder in sorted(folders) for path in sweep(folder, r".+\.ckpt", shared=True)]
