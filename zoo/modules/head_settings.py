"""The keys of `model.head`, one settings class per output head (zoo.modules.heads builds them):

    head: {name: classifier, num_labels: 3, pool: mean, dense: true}

A head's keys belong to it: choosing another head (`model.head=classifier`) replaces them, so a masked-LM
transform is not carried into a classifier built from the same preset. Pure data; what the keys say with the
rest of the config (an ungated activation, a known pooling) is checked by the head's `check_config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from zoo.options import NAME, integer, optional, positive_scale
from zoo.parts import Part, Parts

HEAD = Parts("head", default="lm")

_ACTIVATION = optional(NAME)  # the transform's activation; null: the ungated form of model.activation
_POOL = optional(NAME)  # first | last | mean; null: first on an encoder, last on a decoder
_POOLER = optional(NAME)  # dense + activation on the pooled position: tanh | relu | ... | none


@HEAD.register("lm")
@dataclass(frozen=True)
class LMHeadSettings(Part):
    """Vocabulary logits (tied to the token table with model.tie_embeddings)."""

    transform: bool = False  # dense + activation + norm before the projection (BERT's masked-LM head)
    activation: Annotated[str | None, _ACTIVATION] = None
    bias: bool = False  # bias on the vocabulary projection (BERT, BART's final_logits_bias)
    scale: Annotated[float | None, positive_scale()] = None  # input multiplier (T5's tied head: d ** -0.5)
    softcap: Annotated[float | None, positive_scale()] = None  # logits -> c tanh(logits / c) (Gemma 2)


@HEAD.register("none")
@dataclass(frozen=True)
class BareHeadSettings(Part):
    """The bare model (hidden states), with an optional pooler."""

    pool: Annotated[str | None, _POOL] = None
    pooler: Annotated[str | None, _POOLER] = None  # null: none


@HEAD.register("classifier")
@dataclass(frozen=True)
class ClassifierSettings(Part):
    """One label per sequence."""

    num_labels: Annotated[int, integer(0)] = 0  # the data sets it in training
    pool: Annotated[str | None, _POOL] = None
    pooler: Annotated[str | None, _POOLER] = None  # null: tanh on an encoder (BERT), none on a decoder
    dense: bool = False  # dense + activation + norm before the projection (ModernBERT)
    activation: Annotated[str | None, _ACTIVATION] = None
    proj_bias: bool | None = None  # null: true, except on a decoder (transformers' `score` has none)


@HEAD.register("token_classifier")
@dataclass(frozen=True)
class TokenClassifierSettings(Part):
    """One label per token."""

    num_labels: Annotated[int, integer(0)] = 0
    dense: bool = False
    activation: Annotated[str | None, _ACTIVATION] = None
    proj_bias: bool | None = None  # null: true


@HEAD.register("qa")
@dataclass(frozen=True)
class QASettings(Part):
    """Start and end logits of an answer span."""

    dense: bool = False
    activation: Annotated[str | None, _ACTIVATION] = None
    proj_bias: bool | None = None  # null: true
