"""What every output head answers for and the HEADS registry (the rule for the config keys heads own is
zoo.models.head_keys).

A head is an `OutputHead` registered under its `model.head` name. It says which config keys it reads and
checks them, builds its own tensors (`head.*` in the state dict), turns the stack's last hidden states into
its outputs, names the forward arguments that hold its targets, their shape and the values they may take, and
computes its loss. A model asks its head; nothing outside a head's own class compares head names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar

import torch
from torch import nn

from zoo.registry import Registry
from zoo.utils import IGNORE_INDEX

HEADS: Registry[type[OutputHead]] = Registry("head", key="model.head")


@dataclass
class HeadOutput:
    """What a head gives the model's output record (names as in transformers' outputs)."""

    logits: torch.Tensor | None = None  # lm (B, T, V); classifier (B, L);
                                        # token_classifier (B, T, L); qa (B, T, 2)
    pooler_output: torch.Tensor | None = None  # none with a pooler: (B, C)
    start_logits: torch.Tensor | None = None  # qa: (B, T)
    end_logits: torch.Tensor | None = None  # qa: (B, T)

    def as_dict(self) -> dict[str, torch.Tensor | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def check_label_range(labels: torch.Tensor, n_classes: int, ignore_index: int = IGNORE_INDEX,
                      name: str = "labels") -> None:
    """Every label in [0, n_classes) or ignore_index (one host sync): a clear error instead of an IndexError
    on CPU or a device-side assert on GPU."""
    if bool((((labels < 0) & (labels != ignore_index)) | (labels >= n_classes)).any()):
        counted = labels[labels != ignore_index]
        raise ValueError(f"{name} hold values in [{int(counted.min())}, {int(counted.max())}]; allowed are "
                         f"[0, {n_classes}) and {ignore_index} (ignored).")


def masked_mean_ce(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """Mean cross-entropy over the targets that are not `ignore_index`; logits (..., K), targets (...).
    A batch with no counted target gives 0, not NaN."""
    total = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                              targets.reshape(-1), ignore_index=ignore_index, reduction="sum")
    return total / (targets != ignore_index).sum().clamp(min=1)


class OutputHead(nn.Module):
    """Base of every head; its keys are its settings class under `model.head` (zoo.modules.head_settings).
    Subclasses set `targets` when they are not `labels` and implement
    `outputs` and `loss`; `__init__(cfg, *, tokens, causal)` gets the token table (a tied LM head shares it)
    and whether the stack below is causal: a decoder's summary of a sequence is its last token, an encoder's
    its first, and the defaults of the heads that pool follow transformers' decoders and encoders."""

    name: ClassVar[str] = ""
    targets: ClassVar[tuple[str, ...]] = ("labels",)  # forward keyword arguments holding its training targets
    predicts_tokens: ClassVar[bool] = False  # its logits are a distribution over the vocabulary (head=lm)

    @classmethod
    def check_config(cls, cfg) -> None:
        """Raise ValueError naming the key when `cfg` gives this head a value it cannot take."""

    @classmethod
    def label_classes(cls, cfg) -> int | None:
        """How many values a target may take (class ids in [0, n)); None: targets are not class ids."""
        return None

    @classmethod
    def target_shape(cls, ids_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of each target given input ids of shape (B, T)."""
        return tuple(ids_shape)

    @classmethod
    def check_target_values(cls, cfg, targets: Mapping[str, torch.Tensor]) -> None:
        """Every target value allowed (one host sync per target): class ids in range or ignored."""
        classes = cls.label_classes(cfg)
        if classes is None:
            return
        for name, value in targets.items():
            check_label_range(value, classes, IGNORE_INDEX, name)

    def outputs(self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                logits_to_keep: int = 0) -> HeadOutput:
        """x (B, T, C): the stack's last hidden states (after its final norm) -> this head's outputs."""
        raise NotImplementedError

    def loss(self, out: HeadOutput, targets: Mapping[str, torch.Tensor], *, shift: bool) -> torch.Tensor:
        """The mean loss of `out` against `targets` (every name in `self.targets`, checked). `shift`: the
        model predicts position t+1 from t (a causal LM); only a vocabulary head can use it."""
        raise NotImplementedError

    def no_logits_to_keep(self, logits_to_keep: int) -> None:
        """`logits_to_keep` (decoding) projects last positions to the vocabulary: a head=lm matter."""
        if logits_to_keep:
            raise ValueError(f"logits_to_keep={logits_to_keep} keeps vocabulary logits for decoding "
                             f"(model.head=lm); model.head={self.name} has none.")


def register_head(name: str):
    """Class decorator: register an OutputHead subclass in HEADS under `name` (its `model.head` value)."""

    def add(cls: type[OutputHead]) -> type[OutputHead]:
        cls.name = name
        HEADS.register(name, cls)
        return cls

    return add
