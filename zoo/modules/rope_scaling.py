"""RoPE frequency scalings, chosen by `rope_scaling` through ROPE_SCALINGS: how a model pretrained at one
context length (`rope_original_max_len`) stretches its rotary frequencies to reach a longer one (LongRoPE:
with per-pair factors that change with the sequence's length).

An entry maps the plain inverse frequencies base^(-2i/R) of the R rotated features, shape (R/2,), to the
scaled ones (`inv_freq`), says by how much cos and sin are multiplied (`attention_factor`: YaRN sharpens
attention), declares the config keys it reads with their rules (`options`, checked by zoo.models.vocabulary:
a key of another scaling, set, is refused) and checks what they say together (`check_config`). Formulas follow
transformers' `modeling_rope_utils` (tested against `ROPE_INIT_FUNCTIONS`)."""

from __future__ import annotations

import math

import torch

from zoo.options import BOOL, Options, Rule, number, optional
from zoo.registry import Registry

ROPE_SCALINGS: Registry = Registry("rope_scaling", key="model.rope_scaling")

_FACTOR = Rule(lambda v: number().test(v) and v > 0, "a finite number > 0")
_ORIGINAL = optional(Rule(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, ""),
                     "a positive integer (or null)")
FACTOR = Options({"rope_factor": _FACTOR})  # how far the context is stretched
ORIGINAL = Options({"rope_original_max_len": _ORIGINAL})  # the context length the model was pretrained at
BANDS = Options({"rope_low_freq_factor": _FACTOR, "rope_high_freq_factor": _FACTOR})  # Llama 3.1's
_PER_PAIR = optional(Rule(lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(map(_FACTOR.test, v)),
                          ""), "a list of finite numbers > 0, one per rotated pair (or null)")
PER_PAIR = Options({"rope_short_factor": _PER_PAIR, "rope_long_factor": _PER_PAIR})  # LongRoPE's


def rotary_dims(cfg) -> int:
    """R, the features of each head that rotate: int(head size * rope_fraction), as transformers counts."""
    return int(cfg.head_size * cfg.rope_fraction)


class RopeScaling:
    """No scaling: the frequencies the model was trained with."""

    options = Options({})  # the config keys this entry reads
    attention_factor: float = 1.0  # multiplies cos and sin (so q.k by its square)
    stale_after: int | None = None  # keys rotated for a sequence this long or shorter are stale beyond it

    def __init__(self, cfg) -> None:
        self.factor = cfg.rope_factor

    @classmethod
    def check_config(cls, cfg) -> None:
        """The factor stretches (>= 1); the original length is given where it is read."""
        if "rope_factor" in cls.options.rules and cfg.rope_factor < 1:
            raise ValueError(f"model.rope_factor is how far the context is stretched and must be >= 1, "
                             f"got {cfg.rope_factor!r}.")
        if "rope_original_max_len" in cls.options.rules and cfg.rope_original_max_len is None:
            raise ValueError(f"model.rope_scaling={cfg.rope_scaling!r} needs model.rope_original_max_len, "
                             f"the context length the model was pretrained at (Llama 3.1: 8192).")

    def inv_freq(self, inv_freq: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(R/2,) plain inverse frequencies -> the ones to rotate by in a forward over `position_ids` (only
        LongRoPE's depend on them; None: a sequence within the original length)."""
        return inv_freq


ROPE_SCALINGS.register("none", RopeScaling)


@ROPE_SCALINGS.register("linear")
class LinearScaling(RopeScaling):
    """Position interpolation (Chen et al. 2023): every frequency divided by `rope_factor`, i.e. positions
    squeezed into the trained range."""

    options = FACTOR

    def inv_freq(self, inv_freq: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        return inv_freq / self.factor


@ROPE_SCALINGS.register("llama3")
class Llama3Scaling(RopeScaling):
    """Llama 3.1: wavelengths shorter than original/high_freq_factor are kept, longer than
    original/low_freq_factor divided by `rope_factor`, and those between blended smoothly."""

    options = FACTOR.extended({**BANDS.rules, **ORIGINAL.rules})

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.low, self.high = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
        self.original = cfg.rope_original_max_len

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        if cfg.rope_high_freq_factor <= cfg.rope_low_freq_factor:
            raise ValueError(f"model.rope_high_freq_factor={cfg.rope_high_freq_factor} must be > "
                             f"model.rope_low_freq_factor={cfg.rope_low_freq_factor} (Llama 3.1: 4 and 1).")

    def inv_freq(self, inv_freq: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        wavelen = 2 * math.pi / inv_freq
        low_freq_wavelen, high_freq_wavelen = self.original / self.low, self.original / self.high
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / self.factor, inv_freq)
        # 0 at low_freq_wavelen, 1 at high
        smooth = (self.original / wavelen - self.low) / (self.high - self.low)
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
        return torch.where(medium, smoothed, scaled)


@ROPE_SCALINGS.register("yarn")
class YarnScaling(RopeScaling):
    """YaRN (Peng et al. 2023): pairs turning fewer than beta_slow = 1 times over the original context are
    interpolated (divided by `rope_factor`), more than beta_fast = 32 times kept, a linear ramp between
    (its ends rounded out to whole pairs unless `rope_truncate` is false, as gpt-oss); cos and sin are
    multiplied by 0.1 ln(factor) + 1."""

    options = FACTOR.extended({**ORIGINAL.rules, "rope_truncate": BOOL})
    beta_fast, beta_slow = 32.0, 1.0  # transformers' defaults; not config keys

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.original, self.base = cfg.rope_original_max_len, cfg.rope_base
        self.truncate = cfg.rope_truncate
        self.attention_factor = 0.1 * math.log(self.factor) + 1.0 if self.factor > 1 else 1.0

    def _pair_index(self, rotations: float, dim: int) -> float:
        """The (fractional) feature index whose pair turns `rotations` times over the original context."""
        return dim * math.log(self.original / (rotations * 2 * math.pi)) / (2 * math.log(self.base))

    def inv_freq(self, inv_freq: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        dim = 2 * inv_freq.numel()
        low, high = self._pair_index(self.beta_fast, dim), self._pair_index(self.beta_slow, dim)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001  # transformers' guard against a zero-width ramp
        index = torch.arange(dim // 2, dtype=torch.float32, device=inv_freq.device)
        ramp = ((index - low) / (high - low)).clamp(0, 1)
        keep = 1 - ramp  # 1: extrapolate (keep the frequency), 0: interpolate (divide by factor)
        return inv_freq / self.factor * (1 - keep) + inv_freq * keep


@ROPE_SCALINGS.register("longrope")
class LongRope(RopeScaling):
    """LongRoPE (Ding et al. 2024; Phi-3 128k, Phi-3.5, Phi-4-mini): each rotated pair's frequency divided by
    its own searched factor, `rope_short_factor` while the sequence (largest position + 1) fits in
    `rope_original_max_len` and `rope_long_factor` beyond; cos and sin multiplied by
    sqrt(1 + ln s / ln original), s = max_seq_len / original (1 when s <= 1), in both regimes."""

    options = ORIGINAL.extended(PER_PAIR.rules)

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.original = self.stale_after = cfg.rope_original_max_len
        self.short = torch.tensor(cfg.rope_short_factor, dtype=torch.float32)  # (R/2,)
        self.long = torch.tensor(cfg.rope_long_factor, dtype=torch.float32)  # (R/2,)
        stretch = cfg.max_seq_len / self.original
        if stretch > 1:
            self.attention_factor = math.sqrt(1 + math.log(stretch) / math.log(self.original))

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        pairs = rotary_dims(cfg) // 2
        for key in PER_PAIR.rules:
            value = getattr(cfg, key)
            if value is None or len(value) != pairs:
                raise ValueError(
                    f"model.rope_scaling='longrope' needs model.{key}: one factor per rotated pair, "
                    f"{pairs} here (int(head size * rope_fraction) / 2), got {value!r}.")

    def inv_freq(self, inv_freq: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        short = inv_freq / self.short.to(inv_freq.device)
        if position_ids is None or position_ids.numel() == 0:
            return short
        long = inv_freq / self.long.to(inv_freq.device)
        # a tensor condition, not a Python branch: a compiled decode step keeps one graph
        return torch.where(position_ids.max() + 1 > self.original, long, short)
