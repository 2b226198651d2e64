"""Multi-token prediction (`model.mtp`, DeepSeek-V3's MTP modules): beside the next token, module k of
`depth` predicts token t + k + 1 from position t.

Module k reads the previous hidden state h^{k-1} (h^0: the main stack's output, after its final norm) and the
embedding of token t + k, each through its own norm (`hnorm`, `enorm`: model.norm, DeepSeek's RMSNorm),
joins them with `eh_proj` (2C -> C, [embedding | hidden]), runs one more layer of the stack (`block`: the
layer the stack would build next, its attention causal over the same positions) and hands its output to the
next module; its own norm (`norm`, the checkpoint's `shared_head.norm`) feeds the model's output head,
shared with the main prediction as the token table is. Training adds `weight` times the mean over the
modules of their cross-entropy (`MultiTokenPredictor.loss`) to the main loss. The modules run while the
model trains (or when asked, `forward(..., output_mtp=True)`); evaluation and decoding use the main head
alone; `generate(..., assistant_model="mtp")` drafts with them (zoo.generation.mtp_draft)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.modules.block import Block, branch_scale
from zoo.modules.cache import LayerCache
from zoo.modules.checkpointing import chunked_cross_entropy
from zoo.modules.embedding import Embeddings
from zoo.modules.heads import masked_mean_ce
from zoo.modules.heads.base import HEADS
from zoo.modules.mask import AttentionMask
from zoo.modules.norm import make_norm
from zoo.modules.positional import PositionTerms
from zoo.utils import IGNORE_INDEX


def check_config(cfg, carries: bool) -> None:
    """model.mtp needs what it reads: a causal stack (`carries`, the architecture's answer) under an LM head
    it shares (ValueError naming the key)."""
    if cfg.mtp is None:
        return
    if not carries:
        raise ValueError(f"model.mtp={cfg.mtp.name} predicts later tokens of a decoder's own sequence; "
                         f"model.arch={cfg.arch!r} has none: use model.arch=decoder, or model.mtp=null.")
    if not HEADS.get(cfg.head.name).predicts_tokens:  # the vocabulary head its modules' outputs go through
        raise ValueError(f"model.mtp={cfg.mtp.name} shares the vocabulary head (model.head=lm), but "
                         f"model.head={cfg.head.name}: use model.head=lm, or model.mtp=null.")


class MTPModule(nn.Module):
    """One module: [enorm(embedding) | hnorm(hidden)] -> eh_proj -> block -> (next hidden, normed for the
    head)."""

    def __init__(self, cfg, index: int) -> None:
        """`index`: the block's place in the stack (after the last layer), which sets its kind (MoE or
        dense, local or global) as model.layer_pattern tiles it."""
        super().__init__()
        self.enorm, self.hnorm = make_norm(cfg), make_norm(cfg)
        self.eh_proj = nn.Linear(2 * cfg.d_model, cfg.d_model, bias=False)
        self.block = Block(cfg, index=index)
        self.block.branch_scale = branch_scale(cfg, cfg.n_layers)  # as the stack's layers
        self.norm = make_norm(cfg)
        self.local, self.rotates = cfg.layer_is_local(index), cfg.layer_rotates(index)

    def forward(self, hidden: torch.Tensor, embedded: torch.Tensor, mask: AttentionMask,
                positions: PositionTerms | None,
                cache: LayerCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden, embedded (B, T, C) -> (this module's hidden (B, T, C), its normed output for the head);
        `cache`: the block's own, when drafting (zoo.generation.mtp_draft)."""
        x = self.eh_proj(torch.cat([self.enorm(embedded), self.hnorm(hidden)], dim=-1))  # (B, T, 2C) -> C
        terms = None if positions is None or not self.rotates else positions.for_layer(self.local)
        x, _, _ = self.block(x, mask.for_layer(self.local), terms, cache=cache)
        return x, self.norm(x)


class MultiTokenPredictor(nn.Module):
    """`depth` MTP modules in a chain (`layers`), after the stack's `n_layers` layers."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.weight = cfg.mtp.weight
        self.layers = nn.ModuleList(MTPModule(cfg, cfg.n_layers + k) for k in range(cfg.mtp.depth))

    def forward(self, hidden: torch.Tensor, input_ids: torch.Tensor, embed: Embeddings, mask: AttentionMask,
                positions: PositionTerms | None) -> tuple[torch.Tensor, ...]:
        """The main stack's output (B, T, C) and its input ids (B, T) -> each module's normed output
        (B, T, C): at position t, module k (1-based) reads token t + k; the last k positions have none (a
        placeholder id 0 there: causal attention keeps it from the others, and `loss` ignores their
        outputs)."""
        ids, outs = input_ids, []
        for module in self.layers:
            ids = F.pad(ids[:, 1:], (0, 1))  # (B, T): token t + k at position t (a placeholder at the end)
            hidden, normed = module(hidden, embed.tokens(ids) * embed.scale, mask, positions)
            outs.append(normed)
        return tuple(outs)

    def loss(self, outputs: tuple[torch.Tensor, ...], head: nn.Module, next_targets: torch.Tensor,
             chunk_size: int = 0) -> torch.Tensor:
        """`weight` x the mean over modules of module k's cross-entropy against `next_targets` (B, T) (the
        next token of each position, -100 ignored) moved k places on; `chunk_size` > 0 applies `head` a chunk
        at a time (memory.loss_chunk_size)."""
        losses = []
        for k, normed in enumerate(outputs, start=1):
            targets = F.pad(next_targets[:, k:], (0, k), value=IGNORE_INDEX)  # (B, T): token t + k + 1
            losses.append(chunked_cross_entropy(normed, head, targets, chunk_size) if chunk_size
                          else masked_mean_ce(head(normed), targets, IGNORE_INDEX))
        return self.weight * torch.stack(losses).mean()

