"""Parameter counts by component and FLOPs per token.

FLOPs (one multiply-add = 2 FLOPs, matrix products only; norms, softmax, activations are ignored):
    forward  per token = 2 * N_matmul + 4 * n_attn * T * d_attn
    training per token = 3 * forward = 6 * N_matmul + 12 * n_attn * T * d_attn   (backward = 2 x forward)
N_matmul is the weight count of every Linear a token passes through (the tied output projection counts:
it is a real matmul; embedding and position lookups do not). The attention term is q.k^T (2*T*d_attn) and
weights.v (2*T*d_attn) per token per attention sub-layer over a context of T keys (full T x T, as the
kernels compute it), with d_attn = n_heads * head_dim and n_attn = self-attention layers + cross-attention
layers (latent attention, mla: its q.k and v widths per sub-layer, H (N + R) and H V, averaged into d_attn;
counted as it trains, with the latent decompressed). This is Kaplan et al.'s 2N + 2 n_layer n_ctx d_attn
with both products counted, i.e. PaLM's 6N + 12 L H Q T for training. For an encoder-decoder, "per token"
means per (source, target) token pair with both sequences of length T."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torch import nn

from zoo.modules.block import MIXERS  # every mixer registered
from zoo.modules.embedding import Embeddings
from zoo.modules.feedforward import FeedForward
from zoo.modules.heads import OutputHead
from zoo.modules.moe import MoE, moe_layers
from zoo.modules.norm import norm_module_types

COMPONENTS = ("embeddings", "attention", "ffn", "norms", "head")


def _mixer_types() -> tuple[type, ...]:
    """The token-mixer module classes (attention, mla, ...): what counts as an attention sub-layer."""
    return tuple(MIXERS.get(name) for name in MIXERS.names())


def _component_rules() -> list[tuple[tuple[type, ...], str]]:
    """Module type -> component; the innermost match wins (a norm inside the head counts as a norm)."""
    return [
        (norm_module_types(), "norms"),
        (_mixer_types(), "attention"),
        ((FeedForward, MoE), "ffn"),
        ((nn.Embedding, Embeddings), "embeddings"),
        ((OutputHead,), "head"),
    ]


def _component_of(model: nn.Module, param_path: str, rules) -> str:
    parts = param_path.split(".")[:-1]
    for depth in range(len(parts), -1, -1):  # innermost module first
        module = model.get_submodule(".".join(parts[:depth]))
        for types, name in rules:
            if isinstance(module, types):
                return name
    return "other"


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Unique parameters per component (tied tensors counted once, where first registered) and 'total'; with
    Mixture-of-Experts layers also 'active': the parameters one token passes through (top_k experts each)."""
    rules = _component_rules()
    counts = dict.fromkeys(COMPONENTS, 0)
    for path, param in model.named_parameters():  # remove_duplicate=True: a tied weight appears once
        component = _component_of(model, path, rules)
        counts[component] = counts.get(component, 0) + param.numel()
    counts["total"] = sum(counts.values())
    layers = moe_layers(model)
    if layers:
        counts["active"] = counts["total"] - sum(layer.inactive_parameters() for _, layer in layers)
    return counts


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]], caption: str | None = None):
    """A rich Table: the first column (names) left-aligned, the numbers after it right-aligned."""
    from rich.table import Table

    table = Table(title=title, caption=caption)
    for i, column in enumerate(columns):
        table.add_column(column, justify="right" if i else "left")
    for row in rows:
        table.add_row(*row)
    return table


def parameter_table(model: nn.Module, *, title: str = "parameters"):
    """A rich Table of parameter_counts with each component's share of the total."""
    counts = parameter_counts(model)
    total = max(counts["total"], 1)
    return _table(title, ("component", "parameters", "share"),
                  [(name, f"{n:,}", f"{100 * n / total:.1f}%") for name, n in counts.items()])


@dataclass(frozen=True)
class FlopCount:
    """FLOPs per token for a context of `seq_len` tokens; see the module docstring for the formula."""

    seq_len: int
    n_matmul: int  # weights of every Linear a token passes through
    n_attn: int  # attention sub-layers (self + cross)
    d_attn: int | float  # n_heads * head_dim; a mixer whose values differ in width from its q.k (mla): the
    #                      mean over the sub-layers of (q.k width + v width) / 2
    formula: str = "forward = 2*N_matmul + 4*n_attn*T*d_attn; training = 3*forward"

    @property
    def attention(self) -> int:
        return round(4 * self.n_attn * self.seq_len * self.d_attn)

    @property
    def forward(self) -> int:
        return 2 * self.n_matmul + self.attention

    @property
    def training(self) -> int:
        return 3 * self.forward


def matmul_parameters(model: nn.Module) -> int:
    """Sum of weight sizes of every nn.Linear module a token passes through (a tied head is still its own
    matmul; of a Mixture-of-Experts layer's experts only top_k count)."""
    every = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return every - sum(layer.inactive_matmul_weights() for _, layer in moe_layers(model))


def flops_per_token(model: nn.Module, seq_len: int | None = None) -> FlopCount:
    """FLOPs per token at context `seq_len` (default: model.config.max_seq_len)."""
    cfg = model.config
    t = cfg.max_seq_len if seq_len is None else seq_len
    if t < 1:
        raise ValueError(f"flops_per_token: seq_len must be >= 1, got {t}.")
    # a mixer without attention_widths attends to no T keys (a recurrence): no term that grows with T
    widths = [sum(m.attention_widths()) for m in model.modules()
              if isinstance(m, _mixer_types()) and hasattr(m, "attention_widths")]
    d_attn = sum(widths) / (2 * len(widths)) if widths else cfg.n_heads * cfg.head_size
    d_attn = int(d_attn) if d_attn == int(d_attn) else d_attn
    return FlopCount(t, matmul_parameters(model), len(widths), d_attn)


def flops_table(model: nn.Module, seq_len: int | None = None):
    """A rich Table of flops_per_token, with the formula in the caption."""
    f = flops_per_token(model, seq_len)
    rows = (("N_matmul", f.n_matmul), ("attention term", f.attention), ("forward", f.forward),
            ("training (fwd + bwd)", f.training))
    return _table(f"FLOPs per token (T = {f.seq_len})", ("quantity", "value"),
                  [(name, f"{value:,}") for name, value in rows], caption=f.formula)
