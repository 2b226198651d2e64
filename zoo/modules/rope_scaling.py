"""RoPE frequency scalings, chosen by `model.positional.scaling` through ROPE_SCALINGS: how a model pretrained
at one context length (`original_max_len`) stretches its rotary frequencies to reach a longer one (LongRoPE:
with per-pair factors that change with the sequence's length).

An entry maps the plain inverse frequencies base^(-2i/R) of the R rotated features, shape (R/2,), to the
scaled ones (`inv_freq`), says by how much cos and sin are multiplied (`attention_factor`: YaRN sharpens
attention) and checks what its keys (zoo.modules.positional_settings) say together (`check_config`).
Formulas follow transformers' `modeling_rope_utils` (tested against `ROPE_INIT_FUNCTIONS`)."""

from __future__ import annotations

import math

import torch

from zoo.registry import Registry

ROPE_SCALINGS: Registry = Registry("rope scaling", key="model.positional.scaling")

def rotary_dims(cfg) -> int:
    """R, the features of each head that rotate: int(head size * fraction), as transformers counts; the head
    size is the part of each head the mixer lets rotate (mla: qk_rope_head_dim)."""
    return int(cfg.mixer.rotary_head_size(cfg.head_size) * cfg.positional.fraction)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature 0.1 mscale ln(factor) + 1 (1 when the context is not stretched)."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


class RopeScaling:
    """No scaling: the frequencies the model was trained with."""

    attention_factor: float = 1.0  # multiplies cos and sin (so q.k by its square)
    all_dims_factor: float = 1.0  # multiplies latent attention's (mla) softmax scale, rotated or not
    stale_after: int | None = None  # keys rotated for a sequence this long or shorter are stale beyond it

    def __init__(self, cfg) -> None:
        self.settings = cfg.positional.scaling
        self.factor = getattr(self.settings, "factor", 1.0)

    @classmethod
    def check_config(cls, cfg) -> None:
        """The factor stretches (>= 1); the original length is given where it is read."""
        scaling = cfg.positional.scaling
        if getattr(scaling, "factor", 1.0) < 1:
            raise ValueError(f"model.positional.scaling.factor is how far the context is stretched and must "
                             f"be >= 1, got {scaling.factor!r}.")
        if hasattr(scaling, "original_max_len") and scaling.original_max_len is None:
            raise ValueError(f"model.positional.scaling={scaling.name} needs model.positional.scaling."
                             "original_max_len, the context length the model was pretrained at (Llama 3.1: "
                             "8192).")

    def inv_freq(self, inv_freq: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(R/2,) plain inverse frequencies -> the ones to rotate by in a forward over `position_ids` (only
        LongRoPE's depend on them; None: a sequence within the original length)."""
        return inv_freq


ROPE_SCALINGS.register("none", RopeScaling)


@ROPE_SCALINGS.register("linear")
class LinearScaling(RopeScaling):
    """Position interpolation (Chen et al. 2023): every frequency divided by `factor`, i.e. positions
    squeezed into the trained range."""

    def inv_freq(self, inv_freq: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        return inv_freq / self.factor


@ROPE_SCALINGS.register("llama3")
class Llama3Scaling(RopeScaling):
    """Llama 3.1: wavelengths shorter than original/high_freq_factor are kept, longer than
    original/low_freq_factor divided by `factor`, and those between blended smoothly."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.low, self.high = self.settings.low_freq_factor, self.settings.high_freq_factor
        self.original = self.settings.original_max_len

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        low, high = cfg.positional.scaling.low_freq_factor, cfg.positional.scaling.high_freq_factor
        if high <= low:
            raise ValueError(f"model.positional.scaling.high_freq_factor={high} must be > "
                             f"model.positional.scaling.low_freq_factor={low} (Llama 3.1: 4 and 1).")

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
    interpolated (divided by `factor`), more than beta_fast = 32 times kept, a linear ramp between
    (its ends rounded out to whole pairs unless `truncate` is false, as gpt-oss); cos and sin are
    multiplied by 0.1 ln(factor) + 1. DeepSeek's variant (`mscale`, `mscale_all_dim` both set) multiplies
    them by mscale(factor, mscale) / mscale(factor, mscale_all_dim) and latent attention's softmax scale by
    mscale(factor, mscale_all_dim)^2 (`all_dims_factor`), as transformers' yarn_apply_mscale."""
    beta_fast, beta_slow = 32.0, 1.0  # transformers' defaults; not config keys

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.original, self.base = self.settings.original_max_len, cfg.positional.base
        self.truncate = self.settings.truncate
        mscale, all_dims = self.settings.mscale, self.settings.mscale_all_dim
        self.attention_factor = yarn_mscale(self.factor)
        if mscale and all_dims:
            self.attention_factor = yarn_mscale(self.factor, mscale) / yarn_mscale(self.factor, all_dims)
        if all_dims:
            self.all_dims_factor = yarn_mscale(self.factor, all_dims) ** 2

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
    its own searched factor, `short_factor` while the sequence (largest position + 1) fits in
    `original_max_len` and `long_factor` beyond; cos and sin multiplied by
    sqrt(1 + ln s / ln original), s = max_seq_len / original (1 when s <= 1), in both regimes."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.original = self.stale_after = self.settings.original_max_len
        self.short = torch.tensor(self.settings.short_factor, dtype=torch.float32)  # (R/2,)
        self.long = torch.tensor(self.settings.long_factor, dtype=torch.float32)  # (R/2,)
        stretch = cfg.max_seq_len / self.original
        if stretch > 1:
            self.attention_factor = math.sqrt(1 + math.log(stretch) / math.log(self.original))

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        pairs = rotary_dims(cfg) // 2
        for key in ("short_factor", "long_factor"):
            value = getattr(cfg.positional.scaling, key)
            if value is None or len(value) != pairs:
                raise ValueError(
                    f"model.positional.scaling=longrope needs model.positional.scaling.{key}: one factor per "
                    f"rotated pair, {pairs} here (int(head size * fraction) / 2), got {value!r}.")

    def inv_freq(self, inv_freq: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        short = inv_freq / self.short.to(inv_freq.device)
        if position_ids is None or position_ids.numel() == 0:
            return short
        long = inv_freq / self.long.to(inv_freq.device)
        # a tensor condition, not a Python branch: a compiled decode step keeps one graph
        return torch.where(position_ids.max() + 1 > self.original, long, short)
