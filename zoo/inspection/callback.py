"""A Lightning callback that draws the attention maps of one fixed validation example at every validation
epoch: PNG files under the run directory, and W&B images when a WandbLogger is attached. Off unless added
to the trainer's callbacks (it runs one extra forward with the explicit attention path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger

from zoo.inspection.attention import attention_maps, token_labels
from zoo.inspection.plots import save_attention_maps
from zoo.models.base import ZooModel

# batch key -> the mask that says which of its positions are real (right padding is trimmed)
_SEQUENCE_KEYS = {"input_ids": "attention_mask", "decoder_input_ids": "decoder_attention_mask"}


def find_zoo_model(pl_module: LightningModule, attr: str = "model") -> ZooModel:
    """The zoo model inside a LightningModule: `pl_module.<attr>`, else its first ZooModel submodule."""
    candidate = getattr(pl_module, attr, None)
    if isinstance(candidate, ZooModel):
        return candidate
    for module in pl_module.modules():
        if isinstance(module, ZooModel):
            return module
    raise ValueError(f"AttentionMapLogger: no zoo model at pl_module.{attr} or anywhere inside "
                     f"{type(pl_module).__name__}.")


class AttentionMapLogger(Callback):
    """Every `every_n_epochs` validation epochs, plot the attention maps (all kinds; `layers`, default all;
    at most `max_heads` heads) of the first example of the first validation batch, cut to `max_tokens`."""

    def __init__(
        self,
        every_n_epochs: int = 1,
        max_tokens: int = 24,
        max_heads: int | None = 8,
        layers: list[int] | None = None,
        model_attr: str = "model",
        dirname: str = "attention_maps",
    ) -> None:
        super().__init__()
        if every_n_epochs < 1 or max_tokens < 1:
            raise ValueError(
                f"AttentionMapLogger: every_n_epochs ({every_n_epochs}) "
                f"and max_tokens ({max_tokens}) must be >= 1."
            )
        self.every_n_epochs, self.max_tokens, self.max_heads = every_n_epochs, max_tokens, max_heads
        self.layers, self.model_attr, self.dirname = layers, model_attr, dirname
        self.example: dict[str, torch.Tensor] | None = None  # fixed once, reused every epoch

    def on_validation_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.example is None and batch_idx == 0 and dataloader_idx == 0 and isinstance(batch, dict):
            self.example = self._first_example(batch)

    def _first_example(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        example = {}
        for key, mask_key in _SEQUENCE_KEYS.items():
            if key not in batch:
                continue
            ids = batch[key][0]
            if mask_key in batch:
                ids = ids[batch[mask_key][0].bool()]  # drop right padding
            example[key] = ids[: self.max_tokens].detach().cpu()[None]  # (1, T)
        if "input_ids" not in example:
            raise ValueError("AttentionMapLogger: validation batch has no 'input_ids' "
                             f"(keys: {sorted(batch)}).")
        return example

    def output_dir(self, trainer: Trainer) -> Path:
        root = trainer.log_dir or trainer.default_root_dir
        return Path(root) / self.dirname / f"step{trainer.global_step:07d}"

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        due = trainer.current_epoch % self.every_n_epochs == 0
        if due and not trainer.sanity_checking and self.example is not None and trainer.is_global_zero:
            self.log_maps(trainer, pl_module)

    def log_maps(self, trainer: Trainer, pl_module: LightningModule) -> list[Path]:
        """Draw the example's maps to PNG files and hand them to every WandbLogger; returns the files."""
        model = find_zoo_model(pl_module, self.model_attr)
        device = next(model.parameters()).device
        inputs = {k: v.to(device) for k, v in self.example.items()}
        tokenizer = getattr(trainer.datamodule, "tokenizer", None) or getattr(pl_module, "tokenizer", None)
        ids = inputs.pop("input_ids")
        dec = inputs.get("decoder_input_ids")
        maps = attention_maps(
            model, ids, tokens=token_labels(ids[0].tolist(), tokenizer),
            decoder_tokens=token_labels(dec[0].tolist(), tokenizer) if dec is not None else None, **inputs,
        )
        files = save_attention_maps(maps, self.output_dir(trainer), max_heads=self.max_heads,
                                    layers=self.layers)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                for path in files:
                    logger.log_image(key=f"attention/{path.stem.removeprefix('attention_')}",
                                     images=[str(path)], step=trainer.global_step)
        return files
