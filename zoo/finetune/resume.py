"""What trains, as a checkpoint records it, and the resume check that it did not change: the optimizer
state in a checkpoint belongs to the parameters that trained, so a resume that adds LoRA adapters, drops
them or freezes other parts (even a same-sized set, whose moments torch would load onto the wrong tensors)
is refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from zoo.checkpoint import CheckpointRecord
from zoo.finetune.freeze import frozen_names
from zoo.modules.lora import lora_record
from zoo.utils import some

SHOWN = 8  # frozen parts named in an error; the rest are counted


def training_record(model: nn.Module) -> dict[str, Any]:
    """The checkpoint's `zoo` entries on what trains: `frozen` (freeze.frozen_names) and `lora`
    (lora.lora_record, None without adapters; zoo.load rebuilds the layers from it)."""
    return {"frozen": frozen_names(model), "lora": lora_record(model)}


def _parts(names: Sequence[str]) -> str:
    return some(names, SHOWN) if names else "nothing"


def _difference(saved: CheckpointRecord, current: Mapping[str, Any]) -> str | None:
    """How what trains differs, in words; None when it does not. A checkpoint written before zoo recorded
    `frozen` is compared on its adapters only."""
    if saved.lora != current.get("lora"):
        return f"the checkpoint's LoRA adapters {saved.lora} differ from this run's {current.get('lora')}"
    if saved.frozen is not None and list(saved.frozen) != current["frozen"]:
        return (f"the checkpoint trained with {_parts(saved.frozen)} frozen, this run freezes "
                f"{_parts(current['frozen'])}")
    return None


def check_resumed_training(model: nn.Module, saved: CheckpointRecord, given: str, path: str) -> None:
    """ValueError unless `model` (finetune applied) trains what the checkpoint at `path` (its record `saved`)
    trained."""
    difference = _difference(saved, training_record(model))
    if difference is not None:
        raise ValueError(f"ckpt_path={given}: {difference}: what trains cannot change on resume (the "
                         "optimizer state belongs to the parameters that trained). Resume with the "
                         "checkpoint's finetune settings, or start a new run from its weights with "
                         f"init_from={path}")
