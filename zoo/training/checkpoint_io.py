"""Lightning CheckpointIO that writes atomically (zoo.atomic: temp file + rename) and reads with
weights_only=True, and the sweep of temp files that interrupted checkpoint saves left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from zoo.atomic import sweep
from zoo.checkpoint import atomic_torch_save, read_checkpoint

# checkpoints/ sits 1-3 folders below runs_dir: <run>/, runs/<time>/, multiruns/<time>/<job>/.
RUN_DEPTHS = (1, 2, 3)


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return read_checkpoint(path)  # weights_only=True, with clear errors


def remove_stale_checkpoint_temps(runs_dir: Path, output_dir: Path) -> list[Path]:
    """Delete the temp files of checkpoint saves that were killed, in every run's `checkpoints/` under
    `runs_dir` and in this run's: only temps of `*.ckpt`, and only once their writer is gone
    (zoo.atomic.sweep: other runs may be saving there now). Returns what was removed."""
    folders = {output_dir / "checkpoints"}
    for depth in RUN_DEPTHS:
        folders.update(runs_dir.glob("*/" * depth + "checkpoints"))
    return [path for folder in sorted(folders) for path in sweep(folder, r".+\.ckpt", shared=True)]
