"""Batched beam search: B inputs x K beams run as one (B*K)-row batch; every step picks each input's best
candidates with one top-k over (K * V) scores, so there is no Python loop over beams or inputs.

A hypothesis ends when it emits an EOS; it then competes in a per-input pool of the K best finished
hypotheses, scored by sum of log-probabilities / (generated tokens incl. EOS) ** length_penalty. An input
is done when its pool is full and (early_stopping=True) immediately, or (False, Hugging Face's heuristic)
once no running beam, normalised at the current length, beats the pool's worst. Inputs still running when
the budget ends add their live beams to the pool."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.generation.stepper import Stepper


@dataclass
class BeamResult:
    sequences: torch.Tensor  # (B * n, L) best first within each input, padded with pad_id
    scores: torch.Tensor  # (B * n,) length-normalised sum of log-probabilities


class HypothesisPool:
    """The K best finished hypotheses per input: scores (B, K) (-inf = empty slot), sequences (B, K, Lmax)."""

    def __init__(self, batch: int, k: int, max_len: int, pad_id: int, device: torch.device) -> None:
        self.scores = torch.full((batch, k), float("-inf"), device=device)
        self.seqs = torch.full((batch, k, max_len), pad_id, dtype=torch.long, device=device)
        self.lengths = torch.zeros((batch, k), dtype=torch.long, device=device)
        self.k, self.pad_id = k, pad_id

    def add(self, scores: torch.Tensor, seqs: torch.Tensor) -> None:
        """Merge candidates scores (B, C) (-inf = not a candidate) with sequences (B, C, L) into the pool."""
        b, c, length = seqs.shape
        padded = seqs.new_full((b, c, self.seqs.shape[-1]), self.pad_id)
        padded[:, :, :length] = seqs
        all_scores = torch.cat([self.scores, scores], dim=1)  # (B, K + C)
        all_seqs = torch.cat([self.seqs, padded], dim=1)
        all_lengths = torch.cat([self.lengths, self.lengths.new_full((b, c), length)], dim=1)
        self.scores, keep = all_scores.topk(self.k, dim=1)  # sorted, best first
        self.seqs = all_seqs.gather(1, keep[..., None].expand(-1, -1, all_seqs.shape[-1]))
        self.lengths = all_lengths.gather(1, keep)

    @property
    def full(self) -> torch.Tensor:
        return torch.isfinite(self.scores).all(dim=1)  # (B,)


def beam_search(
    stepper: Stepper,
    num_beams: int,
    max_new_tokens: int,
    *,
    eos_ids: list[int],
    pad_id: int,
    length_penalty: float,
    early_stopping: bool,
    num_return_sequences: int,
) -> BeamResult:
    """Run beam search on `stepper` (B rows, one per input; B*K after the first step); max_new_tokens >= 1."""
    b, k = stepper.batch, num_beams
    device = stepper.ids.device
    pool = HypothesisPool(b, k, stepper.ids.shape[1] + max_new_tokens, pad_id, device)
    beam_scores = torch.zeros(b, k, device=device)
    beam_scores[:, 1:] = float("-inf")  # all beams start identical: let only the first expand at step 1
    eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
    row_base = torch.arange(b, device=device)[:, None] * k  # (B, 1): first row of each input
    done = torch.zeros(b, dtype=torch.bool, device=device)
    generated = 0
    for step in range(max_new_tokens):
        logp = stepper.next_logits().log_softmax(dim=-1)  # (B*K, V); step 0: (B, V), the prompt run once
        if step == 0:
            stepper.expand(k)
        vocab = logp.shape[-1]
        cand = (beam_scores[..., None] + logp.view(b, -1, vocab)).view(b, k * vocab)  # (B, K*V)
        # enough candidates that K non-EOS ones survive even if every beam's best few are EOS tokens
        n_cand = min(k * (1 + len(eos_ids)), k * vocab)
        top_scores, top_idx = cand.topk(n_cand, dim=1)  # (B, C), best first
        parent, token = top_idx // vocab, top_idx % vocab
        is_eos = torch.isin(token, eos)
        generated = step + 1
        norm = float(generated) ** length_penalty
        rank = torch.arange(n_cand, device=device)[None]
        ended = is_eos & (rank < k) & ~done[:, None] & torch.isfinite(top_scores)
        if bool(ended.any()):  # EOS among each input's top-K: a finished hypothesis
            seqs = stepper.ids[row_base + parent]  # (B, C, L)
            seqs = torch.cat([seqs, token[..., None]], dim=-1)
            pool.add(torch.where(ended, top_scores / norm, float("-inf")), seqs)
        live = top_scores.masked_fill(is_eos, float("-inf"))
        beam_scores, pick = live.topk(k, dim=1)  # (B, K): best non-EOS continuations
        rows = (row_base + parent.gather(1, pick)).view(-1)  # (B*K,) parent row of each new beam
        stepper.reorder(rows)
        stepper.append(token.gather(1, pick).view(-1))
        if generated == max_new_tokens:  # last step: live beams still compete with the pool below
            break
        if early_stopping:
            done |= pool.full
        else:
            done |= pool.full & (pool.scores[:, -1] >= beam_scores[:, 0] / norm)
        if bool(done.all()):
            break
    if not bool(done.all()):  # budget spent: live beams of unfinished inputs join the pool as they are
        live_final = torch.where(done[:, None], float("-inf"),
                                 beam_scores / float(generated) ** length_penalty)
        pool.add(live_final, stepper.ids.view(b, k, -1))
    n = num_return_sequences
    length = int(pool.lengths[:, :n].max())
    return BeamResult(pool.seqs[:, :n, :length].reshape(b * n, length), pool.scores[:, :n].reshape(-1))
