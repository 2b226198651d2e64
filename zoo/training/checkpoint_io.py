"""Lightning CheckpointIO that writes atomically (temp file + rename) and reads with weights_only=True."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from zoo.checkpoint import atomic_torch_save, read_checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return read_checkpoint(path)  # weights_only=True, with clear errors
