"""Pictures (matplotlib, Agg backend, PNG): attention heatmap grids per layer with token labels, the mask,
cross-attention, the positional-encoding pattern and the dot-product-vs-distance curve."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from zoo.config import ModelConfig  # noqa: E402
from zoo.inspection.attention import AttentionMaps  # noqa: E402
from zoo.inspection.written import SOFTWARE  # noqa: E402
from zoo.modules.positional import POSITIONALS, Positional  # noqa: E402
from zoo.modules.positional_settings import POSITIONAL

DPI = 80  # small files: the docs keep every picture under 100 KB


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": SOFTWARE})  # how zoo knows its own
    plt.close(fig)
    return path


def _label_axes(ax, q_labels: Sequence[str] | None, k_labels: Sequence[str] | None, fontsize: int) -> None:
    """Keys label the columns, queries the rows; an axis without labels has no ticks."""
    k_labels, q_labels = list(k_labels or []), list(q_labels or [])
    ax.set_xticks(range(len(k_labels)), k_labels, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(q_labels)), q_labels, fontsize=fontsize)


def plot_attention_grid(
    weights: torch.Tensor,
    path: str | Path,
    *,
    q_labels: Sequence[str] | None = None,
    k_labels: Sequence[str] | None = None,
    title: str = "",
    max_heads: int | None = None,
) -> Path:
    """One layer: a grid of (Tq, Tk) heatmaps, one per head; rows are queries, columns keys."""
    if weights.dim() != 3:
        raise ValueError(f"weights must be (heads, Tq, Tk), got shape {tuple(weights.shape)}.")
    heads = weights.shape[0] if max_heads is None else min(max_heads, weights.shape[0])
    cols = min(4, heads)
    rows = math.ceil(heads / cols)
    cell = 0.25 * max(weights.shape[1:]) + 1.0
    fig, axes = plt.subplots(rows, cols, figsize=(cols * cell, rows * cell), squeeze=False)
    fontsize = 7 if max(weights.shape[1:]) <= 16 else 5
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        ax.imshow(weights[h].float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"head {h}", fontsize=8)
        _label_axes(ax, q_labels if h % cols == 0 else None, k_labels, fontsize)
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def save_attention_maps(
    maps: AttentionMaps, out_dir: str | Path, *, batch_index: int = 0, max_heads: int | None = None,
    layers: Sequence[int] | None = None,
) -> list[Path]:
    """Every kind (encoder / decoder / cross) and layer as `attention_<kind>_layer<i>.png`."""
    written = []
    for kind, per_layer in maps.maps.items():
        q_labels, k_labels = maps.axes(kind)
        for i, w in enumerate(per_layer):
            if layers is not None and i not in layers:
                continue
            what = "decoder-to-encoder cross-attention" if kind == "cross" else f"{kind} self-attention"
            title = f"{what}, layer {i}"
            written.append(plot_attention_grid(
                w[batch_index], Path(out_dir) / f"attention_{kind}_layer{i}.png",
                q_labels=q_labels, k_labels=k_labels, title=title, max_heads=max_heads,
            ))
    return written


def plot_mask(mask: torch.Tensor, path: str | Path, *, labels: Sequence[str] | None = None,
              k_labels: Sequence[str] | None = None, title: str = "attention mask") -> Path:
    """(Tq, Tk) additive mask as drawn in the explicit path: visible (0, light) vs masked (-inf, dark)."""
    visible = torch.isfinite(mask.float()).float().cpu().numpy()
    fig, ax = plt.subplots(figsize=(0.25 * mask.shape[-1] + 1.5, 0.25 * mask.shape[-2] + 1.5))
    ax.imshow(visible, cmap="Greys_r", vmin=0.0, vmax=1.0)
    _label_axes(ax, labels, k_labels if k_labels is not None else labels, 7)
    ax.set_xlabel("key (attended to)", fontsize=8)
    ax.set_ylabel("query", fontsize=8)
    ax.set_title(title + "  (white = visible)", fontsize=9)
    return _save(fig, path)


# ----- positional encodings (each scheme draws itself: Positional.pattern / .similarity) -----
def positional_pattern(cfg: ModelConfig, n_positions: int = 64, module: Positional | None = None
                       ) -> tuple[torch.Tensor, str] | None:
    """(positions, features) picture of the configured scheme and its feature-axis label, or None when the
    scheme has nothing to draw; `module` is a model's own scheme (a learned table reads its trained
    values)."""
    scheme = module if module is not None else POSITIONALS.get(cfg.positional.name)(cfg)
    return scheme.pattern(n_positions)


def plot_positional_pattern(cfg: ModelConfig, path: str | Path, *, n_positions: int = 64,
                            module: Positional | None = None) -> Path | None:
    """The pattern as a heatmap; None (no file) for a scheme with nothing to draw, e.g. positional=none."""
    drawn = positional_pattern(cfg, n_positions, module)
    if drawn is None:
        return None
    matrix, xlabel = drawn
    fig, ax = plt.subplots(figsize=(6, 3.5))
    im = ax.imshow(matrix.float().cpu().numpy(), aspect="auto", cmap="RdBu", interpolation="nearest")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("position", fontsize=8)
    ax.set_title(f"positional encoding: {cfg.positional.name}", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03)
    return _save(fig, path)


def _similarity_scheme(scheme: str, dim: int, max_distance: int, base: float) -> Positional:
    settings = POSITIONAL.parse(scheme)
    if hasattr(settings, "base"):  # a scheme with a frequency base (rope) draws at the one asked for
        settings = settings.replaced(base=base)
    cfg = ModelConfig(d_model=dim, n_heads=1, positional=settings, max_seq_len=max_distance + 1)
    return POSITIONALS.get(scheme)(cfg)


def similarity_schemes(dim: int = 64) -> list[str]:
    """The registered schemes with a position-similarity curve (a closed form of position alone)."""
    probe = torch.arange(2)[None]
    return [n for n in POSITIONALS.names()
            if _similarity_scheme(n, dim, 1, 10000.0).similarity(probe) is not None]


def dot_vs_distance(scheme: str, dim: int, max_distance: int,
                    base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(distances 0..max_distance, dot products) from the scheme's own code (`Positional.similarity`).
    sinusoidal: PE(0) . PE(k) (= sum_i cos(w_i k)); rope: rotate(q, 0) . rotate(k, k) with q = k = ones,
    the long-range decay curve of RoFormer (= 2 sum_i cos(theta_i k)). rope uses one head of size dim."""
    positions = torch.arange(max_distance + 1)[None]  # (1, K+1)
    dots = _similarity_scheme(scheme, dim, max_distance, base).similarity(positions)
    if dots is None:
        allowed = similarity_schemes(dim)
        raise ValueError(f"positional {scheme!r} has no dot-product-vs-distance curve. Allowed: "
                         f"{', '.join(allowed)}.")
    return positions[0], dots


def plot_dot_vs_distance(path: str | Path, *, dim: int = 64, max_distance: int = 128,
                         base: float = 10000.0) -> Path:
    """Every scheme's curve on one plot: how similar two positions' encodings are as their distance grows."""
    fig, ax = plt.subplots(figsize=(6, 3))
    for scheme in similarity_schemes(dim):
        dist, dots = dot_vs_distance(scheme, dim, max_distance, base)
        ax.plot(dist.numpy(), dots.numpy(), label=scheme)
    ax.set_xlabel("distance |m - n|", fontsize=8)
    ax.set_ylabel("dot product", fontsize=8)
    ax.set_title(f"position similarity vs distance (dim {dim})", fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)
