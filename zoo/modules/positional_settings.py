"""The keys of `model.positional`, one settings class per scheme (zoo.modules.positional reads them), and of
`model.positional.scaling`, one per RoPE frequency scaling (zoo.modules.rope_scaling):

    positional: {name: rope, base: 500000.0, scaling: {name: llama3, factor: 32, original_max_len: 8192}}

Pure data; what the keys say together with the rest of the config (the rotated features are even, the
factors stretch) is checked by the scheme's `check_config`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from zoo.options import integer, list_of, number, optional
from zoo.parts import Part, Parts

POSITIONAL = Parts("positional", default="learned")
ROPE_SCALING = Parts("positional.scaling", default="none")

_FACTOR = number(0, low_open=True)  # a finite number > 0
_ORIGINAL = optional(integer(1))
_PER_PAIR = optional(list_of(_FACTOR))  # one factor per rotated pair


@POSITIONAL.register("none")
@dataclass(frozen=True)
class NoPositions(Part):
    """No positional information (a bag of tokens, or positions learned from the causal mask alone)."""


@POSITIONAL.register("alibi")
@dataclass(frozen=True)
class AlibiSettings(Part):
    """ALiBi: one distance slope per head, from the head count; no key of its own."""


@POSITIONAL.register("sinusoidal")
@dataclass(frozen=True)
class SinusoidalSettings(Part):
    layout: Literal["interleaved", "half"] = "interleaved"  # the paper's sin, cos, sin, ... | sin..., cos...


@POSITIONAL.register("learned")
@dataclass(frozen=True)
class LearnedSettings(Part):
    offset: Annotated[int, integer(0)] = 0  # table index offset (BART 2, RoBERTa pad_id + 1)
    skip_pads: bool = False  # positions count real tokens only; pads read row pad_id (RoBERTa)


@POSITIONAL.register("t5_relative")
@dataclass(frozen=True)
class RelativeSettings(Part):
    buckets: Annotated[int, integer(1)] = 32  # distance buckets (half per direction, bidirectional)
    max_distance: Annotated[int, integer(1)] = 128  # distances beyond this share the last bucket


@ROPE_SCALING.register("none")
@dataclass(frozen=True)
class NoScaling(Part):
    """The frequencies the model was trained with."""


@ROPE_SCALING.register("linear")
@dataclass(frozen=True)
class LinearScalingSettings(Part):
    factor: Annotated[float, _FACTOR] = 1.0  # every frequency divided by it (position interpolation)


@ROPE_SCALING.register("llama3")
@dataclass(frozen=True)
class Llama3ScalingSettings(Part):
    factor: Annotated[float, _FACTOR] = 1.0  # how far the context is stretched
    low_freq_factor: Annotated[float, _FACTOR] = 1.0  # wavelengths > original_max_len / this: / factor
    high_freq_factor: Annotated[float, _FACTOR] = 4.0  # wavelengths < original_max_len / this: kept
    original_max_len: Annotated[int | None, _ORIGINAL] = None  # the context length pretrained at


@ROPE_SCALING.register("yarn")
@dataclass(frozen=True)
class YarnScalingSettings(Part):
    factor: Annotated[float, _FACTOR] = 1.0
    original_max_len: Annotated[int | None, _ORIGINAL] = None
    truncate: bool = True  # the ramp's ends rounded out to whole pairs (gpt-oss: false)
    mscale: Annotated[float | None, optional(number(0))] = None  # DeepSeek: with mscale_all_dim, cos and
    #                                                  sin get mscale(factor, this) / mscale(factor, all_dim)
    mscale_all_dim: Annotated[float | None, optional(number(0))] = None  # DeepSeek: latent attention's
    #                                                  softmax scale times mscale(factor, this)^2


@ROPE_SCALING.register("longrope")
@dataclass(frozen=True)
class LongRopeSettings(Part):
    original_max_len: Annotated[int | None, _ORIGINAL] = None
    short_factor: Annotated[tuple[float, ...] | None, _PER_PAIR] = None  # a divisor per rotated pair, in
    #                                                                       original_max_len
    long_factor: Annotated[tuple[float, ...] | None, _PER_PAIR] = None  # the same, for a longer sequence


@POSITIONAL.register("rope")
@dataclass(frozen=True)
class RopeSettings(Part):
    base: Annotated[float, _FACTOR] = 10000.0
    local_base: Annotated[float | None, optional(_FACTOR)] = None  # the sliding-window layers' base,
    #                                                  unscaled (Gemma 3: 1e4; `scaling` acts on the others)
    layout: Literal["half", "interleaved"] = "half"  # rotate-half (GPT-NeoX, Llama) | pairs (RoFormer, GPT-J)
    fraction: Annotated[float, number(0, 1, low_open=True)] = 1.0  # share of each head's features that
    #                                                                rotate (GPT-NeoX 0.25, Phi-2 0.4)
    scaling: Annotated[Part, ROPE_SCALING] = field(default_factory=NoScaling)  # for a longer context
