"""Parity checks a decoder family runs against its `transformers` model (every decoder family): logits on
right- and left-padded batches, greedy tokens against `generate`, and export -> import -> `transformers` round
trips."""

from __future__ import annotations

import torch

from tests.pretrained.helpers import export_round_trip, right_padded
from zoo.generation import generate

NEW = 8
GREEDY = dict(do_sample=False, num_beams=1, max_new_tokens=NEW)


def right_padded_logits_match(hf, model, vocab: int = 99) -> None:
    """Every real position agrees (pad rows see real keys too, but their positions are a convention)."""
    ids, mask = right_padded(3, 12, vocab, [12, 9, 3])
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    real = mask.bool()
    assert (got[real] - ref[real]).abs().max() < 1e-4


def left_padded_logits_match(hf, model, vocab: int = 99, *, hf_positions: bool = True) -> None:
    """zoo gets position_ids = cumsum(mask) - 1; `transformers` the same, or none (`hf_positions=False`, for a
    model that derives them from the mask itself). Fully masked pad rows are undefined and not compared."""
    ids, mask = right_padded(2, 10, vocab, [10, 4], seed=3)
    mask = mask.flip(-1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, **({"position_ids": pos} if hf_positions else {})).logits
        got = model(ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()
    assert (got[real] - ref[real]).abs().max() < 1e-4


def left_padded_prompts(vocab: int = 99):
    ids = torch.randint(3, vocab, (3, 6), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    mask[2, :4] = 0
    return ids.masked_fill(mask == 0, 0), mask


def same_tokens(ours: torch.Tensor, theirs: torch.Tensor, pad: int) -> None:
    """Equal where both exist; a longer side may only continue with padding (finished rows)."""
    n = min(ours.shape[1], theirs.shape[1])
    assert torch.equal(ours[:, :n], theirs[:, :n]), (ours, theirs)
    for extra in (ours[:, n:], theirs[:, n:]):
        assert bool((extra == pad).all())


def greedy_matches(hf, model) -> None:
    """Left-padded prompts: an argmax loop over zoo's forward and zoo's `generate` (KV cache, with an EOS that
    row 1 really emits) give `transformers` `generate`'s tokens."""
    ids, mask = left_padded_prompts()
    with torch.no_grad():
        ref = hf.generate(input_ids=ids, attention_mask=mask, pad_token_id=0, eos_token_id=None, **GREEDY)
        seq, m = ids, mask
        for _ in range(NEW):
            pos = (m.cumsum(-1) - 1).clamp(min=0)
            nxt = model(seq, attention_mask=m, position_ids=pos).logits[:, -1].argmax(-1, keepdim=True)
            seq, m = torch.cat([seq, nxt], 1), torch.cat([m, torch.ones_like(nxt)], 1)
    assert torch.equal(seq, ref)
    eos = int(seq[1, ids.shape[1] + 2])
    with torch.no_grad():
        ref = hf.generate(input_ids=ids, attention_mask=mask, pad_token_id=0, eos_token_id=eos, **GREEDY)
    assert bool((ref[1, ids.shape[1] + 3:] == 0).all())  # the stop really happened
    same_tokens(generate(model, ids, attention_mask=mask, eos_token_id=eos, pad_token_id=0, **GREEDY), ref,
                pad=0)


def export_round_trips(model, hf_class, path, vocab: int = 99):
    """helpers.export_round_trip, then `transformers` gives the same logits on a right-padded batch. Returns
    the export folder."""
    out, hf = export_round_trip(model, hf_class, path)
    right_padded_logits_match(hf, model, vocab)
    return out
