"""Attention masks: causal structure, key padding, packed documents, positional score bias and (sliding-window
layers) a band of nearby keys, combined once per forward and shared by the layers that use them; and which
new tokens are real (`real_tokens`: the recurrent and convolution mixers zero pads with it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMask:
    """What one attention call needs; built once per forward and shared by every layer of a stack."""

    mask: torch.Tensor | None = None  # bool (B|1, 1, Tq, Tk), True = may attend; or float additive bias
    is_causal: bool = False  # plain causal square mask: lets SDPA pick its fastest kernel
    valid_rows: torch.Tensor | None = None  # (B|1, 1, Tq|1, 1): rows with at least one visible key
    local: AttentionMask | None = None  # the same mask limited to a window of nearby keys (sliding layers)

    def for_layer(self, is_local: bool) -> AttentionMask:
        """What one layer attends with: the windowed variant for a sliding-window layer."""
        return self.local if is_local and self.local is not None else self

    def apply(self, scores: torch.Tensor) -> torch.Tensor:
        """Explicit path: add the bias and put -inf on every masked score (B, H, Tq, Tk)."""
        if self.is_causal:
            q_len, k_len = scores.shape[-2:]
            future = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).triu(1 + k_len - q_len)
            return scores.masked_fill(future, float("-inf"))
        if self.mask is None:
            return scores
        if self.mask.dtype == torch.bool:
            return scores.masked_fill(~self.mask, float("-inf"))
        return scores + self.mask


def real_tokens(mask: AttentionMask, b: int, t: int) -> torch.Tensor | None:
    """(B, T) 1.0 for the new tokens that are real, 0.0 for pads, read off the diagonal of the mask's last T
    keys (a causal query always sees its own key unless that key is a pad); None when nothing is masked. A
    per-head score bias (alibi, T5 buckets) masks every head alike, so the first head is read."""
    if mask.mask is None:
        return None
    m = mask.mask[..., mask.mask.shape[-1] - t:]  # (B|1, H|1, T, T) or (T, T): the new keys
    if m.dim() == 4:
        m = m[:, :1]  # (B|1, 1, T, T)
    m = m.expand(b, 1, t, t)[:, 0]  # (B, T, T)
    diagonal = m.diagonal(dim1=-2, dim2=-1)
    real = diagonal if m.dtype == torch.bool else diagonal > float("-inf")
    return real.float()


def build_mask(
    key_mask: torch.Tensor | None,
    *,
    causal: bool,
    q_len: int,
    k_len: int,
    bias: torch.Tensor | None = None,
    window: int | None = None,
    documents: torch.Tensor | None = None,
    window_only: bool = False,
) -> AttentionMask:
    """Combine key padding (B, Tk) (1 = real token), causality (the last q_len of k_len positions) and an
    additive bias (1, H, Tq, Tk) into one mask. Queries only ever see keys at or before their own index.
    With `window` W, `.local` also limits each query to nearby keys, as transformers does: causal, query i
    sees key j iff i - W < j <= i (itself and the W - 1 keys before it, Mistral); bidirectional, iff
    |i - j| <= W (W keys on either side). With `documents` (B, T) (packed rows, no cache: Tq = Tk = T), a
    query only sees keys of its own document (`document_mask`). `window_only`: every layer is a sliding-window
    one (Mistral), so the windowed mask is the only one built."""
    same_doc = document_mask(documents) if documents is not None else None  # (B, 1, T, T)
    local = None
    if window is not None:
        band = _band(q_len, k_len, window, causal, _device(key_mask, bias, same_doc))  # (Tq, Tk)
        if same_doc is not None:
            band = band & same_doc
        local = _combine(key_mask, causal=causal, q_len=q_len, k_len=k_len, bias=bias, band=band)
        if window_only:
            return local
    full = _combine(key_mask, causal=causal, q_len=q_len, k_len=k_len, bias=bias, band=same_doc)
    full.local = local
    return full


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) document index of each token -> (B, 1, T, T), True where query and key share a document."""
    return (document_ids[:, :, None] == document_ids[:, None, :])[:, None]


def document_positions(document_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) position of each token inside its document: 0 at a document's first token, as if it ran alone.
    Documents are contiguous runs of equal ids (`check_documents`)."""
    b, t = document_ids.shape
    index = torch.arange(t, device=document_ids.device).expand(b, t)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]  # (B, T) first token of a document
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(-1).values  # index of the doc's start
    return index - first


def check_documents(document_ids: torch.Tensor, shape: tuple[int, ...], *, order: bool = True) -> None:
    """document_ids are integers of the ids' shape, non-decreasing along each row (each document one run of
    tokens: relative position schemes measure distance between token indices). `order=False` checks the shape
    only (a caller checked the values on the host: `check_document_order`)."""
    if not isinstance(document_ids, torch.Tensor) or document_ids.is_floating_point() or \
            tuple(document_ids.shape) != tuple(shape):
        got = (f"{tuple(document_ids.shape)} {document_ids.dtype}" if isinstance(document_ids, torch.Tensor)
               else type(document_ids).__name__)
        raise ValueError(f"document_ids must be an integer tensor of shape {tuple(shape)} "
                         f"(the input ids' shape), got {got}.")
    if order:
        check_document_order(document_ids)


def check_document_order(document_ids: torch.Tensor) -> None:
    """Each row's document ids never decrease (one host sync)."""
    steps = document_ids[:, 1:] - document_ids[:, :-1]
    if bool((steps < 0).any()):
        row, col = (int(i) for i in (steps < 0).nonzero()[0])
        raise ValueError("document_ids must not decrease along a row (each document one contiguous run), "
                         f"but row {row} goes from {int(document_ids[row, col])} to "
                         f"{int(document_ids[row, col + 1])} at position {col + 1}.")


def _device(*tensors: torch.Tensor | None):
    """The device of the first given tensor (None: the default device)."""
    return next((t.device for t in tensors if t is not None), None)


def _band(q_len: int, k_len: int, window: int, causal: bool, device) -> torch.Tensor:
    """(Tq, Tk) True where key j is within `window` of query i (queries are the last q_len of k_len keys)."""
    q_idx = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    distance = q_idx - torch.arange(k_len, device=device)[None, :]  # i - j
    return distance < window if causal else distance.abs() <= window


def _combine(
    key_mask: torch.Tensor | None, *, causal: bool, q_len: int, k_len: int, bias: torch.Tensor | None,
    band: torch.Tensor | None = None,
) -> AttentionMask:
    """One mask from padding, causality and `band`, a further (Tq, Tk) or (B, 1, Tq, Tk) limit (window,
    documents)."""
    allowed = None
    if key_mask is not None:
        if key_mask.shape[-1] != k_len:
            raise ValueError(f"attention_mask covers {key_mask.shape[-1]} "
                             f"positions but there are {k_len} keys.")
        allowed = key_mask.bool()[:, None, None, :]  # (B, 1, 1, Tk)
    if causal and q_len > 1:  # one new query after a cache sees every cached key: no causal mask needed
        if allowed is None and bias is None and band is None and q_len == k_len:
            return AttentionMask(is_causal=True)
        tri = torch.ones(q_len, k_len, dtype=torch.bool,
                         device=_device(key_mask, bias, band)).tril(k_len - q_len)
        allowed = tri if allowed is None else allowed & tri  # (Tq, Tk) or (B, 1, Tq, Tk)
    if band is not None:
        allowed = band if allowed is None else allowed & band
    valid = allowed.any(-1, keepdim=True) if key_mask is not None else None
    if bias is None:
        return AttentionMask(allowed, valid_rows=valid)
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    return AttentionMask(bias, valid_rows=valid)
