"""Lightning CheckpointIO that writes atomically (temp file + rename) and reads with weights_only=True, and
the clean-up of temp files that interrupted checkpoint saves left behind."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from zoo.checkpoint import atomic_torch_save, read_checkpoint
from zoo.data.cache import STALE_AFTER_S

# `atomic_file`'s temp name for a checkpoint: `.<name>.ckpt.<random>.tmp` beside it.
CHECKPOINT_TEMP = re.compile(r"\..+\.ckpt\.[A-Za-z0-9_]+\.tmp")
# checkpoints/ sits 1-3 folders below runs_dir: <run>/, runs/<time>/, multiruns/<time>/<job>/.
RUN_DEPTHS = (1, 2, 3)


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return read_checkpoint(path)  # weights_only=True, with clear errors


def remove_stale_checkpoint_temps(runs_dir: Path, output_dir: Path) -> list[Path]:
    """Delete the temp files of checkpoint saves that were killed, in every run's `checkpoints/` under
    `runs_dir` and in this run's: only zoo's temp names, and only after an hour in which nothing wrote to
    them (a live save rewrites its temp continuously). Returns what was removed."""
    folders = {output_dir / "checkpoints"}
    for depth in RUN_DEPTHS:
        folders.update(runs_dir.glob("*/" * depth + "checkpoints"))
    now, removed = time.time(), []
    for folder in sorted(folders):
        for path in folder.glob(".*.tmp") if folder.is_dir() else ():
            try:
                stat = path.lstat()
            except FileNotFoundError:
                continue
            if CHECKPOINT_TEMP.fullmatch(path.name) and path.is_file() and now - stat.st_mtime > STALE_AFTER_S:
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
