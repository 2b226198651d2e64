"""Speculative decoding: a small draft model proposes k tokens one by one, the target scores all of them in
one forward, a prefix of them is kept, plus one token of the target's own (a correction, or a bonus when every
draft token was kept). The speed-up comes from the target running once per round instead of once per token.
Batch 1 only (rows would accept different prefix lengths).

Greedy: the kept prefix is the one the target itself would have chosen, so the output is the target's greedy
output token for token. Sampling (Leviathan et al. 2023; Chen et al. 2023): the draft samples x from its
distribution q, the target keeps it with probability min(1, p(x) / q(x)) and on the first rejection samples
from max(0, p - q), renormalised; every emitted token is then distributed exactly as a sample from the
target's p (both p and q after the same temperature / top-k / top-p).

Rollback: after a round each cache is cut back to the kept tokens (`KVCache.crop`). K/V are simply cut;
a layer with a recurrent state or convolution window (gated_deltanet, short_conv) cannot un-apply tokens,
so both caches keep those entries after each of the last num_draft + 1 tokens of every forward
(`KVCache.keep_states`): a verify pass feeds that many past the kept prefix and the draft one token at a
time, so the state after any kept token is at hand and no token is recomputed."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.generation.logits import Choice
from zoo.modules.cache import KVCache


@dataclass
class SpeculativeStats:
    """What the draft achieved: accepted / proposed draft tokens."""

    proposed: int = 0
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def check_assistant(target, draft, batch: int, prompt_len: int, max_new_tokens: int, cfg) -> None:
    """One ValueError naming what does not fit, before any work."""
    if draft.is_encoder_decoder or target.is_encoder_decoder:
        raise ValueError("assistant_model (speculative decoding) needs decoder-only models "
                         f"(model.arch='decoder') for both; got target arch {target.config.arch!r}, draft "
                         f"arch {draft.config.arch!r}.")
    if draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(
            f"assistant_model has model.vocab_size={draft.config.vocab_size} but the target has "
            f"{target.config.vocab_size}: the draft must share the target's tokenizer (same token ids).")
    if batch != 1:
        raise ValueError(f"assistant_model decodes one prompt at a time (batch 1); got {batch} prompts.")
    unsupported = {"num_beams": cfg.num_beams > 1, "num_return_sequences": cfg.num_return_sequences > 1,
                   "compile": cfg.compile, "use_cache=False": not cfg.use_cache,
                   "cache_implementation": cfg.cache_implementation == "static"}
    bad = [name for name, on in unsupported.items() if on]
    if bad:
        raise ValueError("assistant_model supports greedy decoding and sampling (one sequence) with the "
                         f"dynamic KV cache only; drop {', '.join(bad)}.")
    for who, model in (("target", target), ("assistant_model", draft)):
        reach = model.positions.max_positions
        if reach is not None and prompt_len + max_new_tokens > reach:
            raise ValueError(
                f"speculative decoding keeps both caches for the whole run; prompt ({prompt_len}) + "
                f"max_new_tokens ({max_new_tokens}) exceeds the {who}'s reach of {reach} positions "
                "(model.max_seq_len).")
        stale = model.positions.stale_after
        if stale is not None and prompt_len <= stale < prompt_len + max_new_tokens:
            raise ValueError(
                f"speculative decoding keeps both caches for the whole run, but the {who}'s "
                f"model.positional.scaling={model.config.positional.scaling.name} changes its frequencies "
                f"past model.positional.scaling.original_max_len={stale} positions (prompt {prompt_len} + "
                f"max_new_tokens {max_new_tokens}); decode without assistant_model (it re-runs the sequence "
                "once there).")


def _logits(model, ids: torch.Tensor, cache: KVCache, keep: int) -> torch.Tensor:
    return model(ids, cache=cache, logits_to_keep=keep).logits.float()  # (1, keep, V)


def draft_token(logits: torch.Tensor, choice: Choice, qs: list) -> torch.Tensor:
    """The next draft token (1, 1) from the draft's logits (1, V): argmax, or sampled, its distribution q
    appended to `qs` (what acceptance compares the target's p with)."""
    if not choice.sample:
        return logits.argmax(-1, keepdim=True)
    qs.append(choice.probs(logits))
    return choice.draw(qs[-1])


def _draft(draft, proposal: torch.Tensor, d_cache: KVCache, k: int,
           choice: Choice) -> tuple[torch.Tensor, list]:
    """k draft tokens appended to `proposal` (one draft forward each) and, sampling, their distributions q."""
    qs = []
    for _ in range(k):
        logits = _logits(draft, proposal[:, d_cache.length:], d_cache, 1)[:, -1]  # (1, V)
        proposal = torch.cat([proposal, draft_token(logits, choice, qs)], dim=1)
    return proposal, qs


def accept_drafts(logits: torch.Tensor, drafted: torch.Tensor, qs: list, choice: Choice, eos: torch.Tensor,
                  stats: SpeculativeStats, step_logits: list[torch.Tensor]) -> tuple[torch.Tensor, bool]:
    """One round's outcome from the target's logits (1, k + 1, V): the new tokens (1, n + 1) (the kept drafts
    and one of the target's own, cut after an eos), whether an eos ended the run; counts the round in
    `stats` and appends each new token's logits to `step_logits`."""
    n, own = _verify(logits, drafted, qs, choice)
    stats.proposed += drafted.shape[1]
    stats.accepted += n
    new = torch.cat([drafted[:, :n], own], dim=1)  # (1, n + 1)
    hit = torch.isin(new[0], eos).nonzero()
    if len(hit):
        new = new[:, : int(hit[0]) + 1]
    step_logits += [logits[:, i] for i in range(new.shape[1])]
    return new, bool(len(hit))


def _verify(logits: torch.Tensor, drafted: torch.Tensor, qs: list,
            choice: Choice) -> tuple[int, torch.Tensor]:
    """(draft tokens kept, the target's own next token (1, 1)) from its logits (1, k + 1, V) after each of the
    last k + 1 tokens."""
    k = drafted.shape[1]
    if not choice.sample:
        picks = logits.argmax(-1)  # (1, k + 1): the target's greedy pick at each draft position
        n = int((picks[:, :k] == drafted)[0].long().cumprod(0).sum())  # leading draft tokens it agrees with
        return n, picks[:, n : n + 1]
    ps = choice.probs(logits)  # (1, k + 1, V)
    for i in range(k):
        x = int(drafted[0, i])
        p, q = ps[:, i], qs[i]  # (1, V) each
        if choice.uniform(logits.device) < float(p[0, x] / q[0, x]):  # q[x] > 0: x was drawn from q
            continue
        residual = (p - q).clamp_min(0.0)  # rejected: p(x) < q(x), so p - q has positive mass somewhere
        total = residual.sum()
        return i, choice.draw(residual / total if float(total) > 0 else p)
    return k, choice.draw(ps[:, k])  # every draft token kept: a bonus token from the target


def speculative_decode(
    target, draft, ids: torch.Tensor, max_new_tokens: int, *, eos_ids: list[int], num_draft: int,
    choice: Choice | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], SpeculativeStats]:
    """(sequence (1, L + new), the target's raw logits (1, V) for every new token, stats). Invariant between
    rounds: each cache holds a prefix of `seq` (never a rejected token); the tokens after it are fed next."""
    choice = choice or Choice()
    seq = ids
    t_cache, d_cache = target.new_cache(), draft.new_cache()
    for cache in (t_cache, d_cache):  # recurrent layers keep what a crop within one round goes back to
        cache.keep_states(num_draft + 1)
    stats, step_logits = SpeculativeStats(), []
    eos = torch.tensor(eos_ids, dtype=torch.long, device=ids.device)
    prompt_len = ids.shape[1]
    while seq.shape[1] - prompt_len < max_new_tokens:
        remaining = max_new_tokens - (seq.shape[1] - prompt_len)
        k = min(num_draft, remaining - 1)  # the target adds one token of its own per round
        proposal, qs = _draft(draft, seq, d_cache, k, choice)
        drafted = proposal[:, seq.shape[1]:]  # (1, k)
        fresh = proposal[:, t_cache.length:]  # not yet in the target's cache: pending + drafted
        logits = _logits(target, fresh, t_cache, k + 1)  # (1, k + 1, V): after each of the last k + 1 tokens
        new, ended = accept_drafts(logits, drafted, qs, choice, eos, stats, step_logits)
        seq = torch.cat([seq, new], dim=1)
        t_cache.crop(seq.shape[1] - 1)  # keep accepted drafts; the last token is fed next round
        d_cache.crop(seq.shape[1] - 1)
        if ended:
            break
    return seq, step_logits, stats
