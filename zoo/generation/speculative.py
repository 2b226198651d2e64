"""Speculative decoding (greedy): a small draft model proposes k tokens one by one, the target scores all of
them in one forward, and the longest prefix the target itself would have chosen is kept, plus the target's
own next token (a correction, or a bonus when every draft token was accepted). The output is the target's
greedy output token for token; the speed-up comes from the target running once per round instead of once
per token. Batch 1 only (rows would accept different prefix lengths)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.modules.cache import KVCache


@dataclass
class SpeculativeStats:
    """What the draft achieved: accepted / proposed draft tokens, and target forwards run."""

    proposed: int = 0
    accepted: int = 0
    target_calls: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def check_assistant(target, draft, batch: int, prompt_len: int, max_new_tokens: int, cfg) -> None:
    """One ValueError naming what does not fit, before any work."""
    if draft.is_encoder_decoder or target.is_encoder_decoder:
        raise ValueError("assistant_model (speculative decoding) needs decoder-only models (model.arch='decoder') "
                         f"for both; got target arch {target.config.arch!r}, draft arch {draft.config.arch!r}.")
    if draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(
            f"assistant_model has model.vocab_size={draft.config.vocab_size} but the target has "
            f"{target.config.vocab_size}: the draft must share the target's tokenizer (same token ids).")
    if batch != 1:
        raise ValueError(f"assistant_model decodes one prompt at a time (batch 1); got {batch} prompts.")
    unsupported = {"num_beams": cfg.num_beams > 1, "do_sample": cfg.do_sample, "compile": cfg.compile,
                   "use_cache=False": not cfg.use_cache, "cache_implementation": cfg.cache_implementation == "static"}
    bad = [name for name, on in unsupported.items() if on]
    if bad:
        raise ValueError(f"assistant_model supports greedy decoding with the dynamic KV cache only; drop "
                         f"{', '.join(bad)}.")
    for who, model in (("target", target), ("assistant_model", draft)):
        reach = model.positions.max_positions
        if reach is not None and prompt_len + max_new_tokens > reach:
            raise ValueError(
                f"speculative decoding keeps both caches for the whole run; prompt ({prompt_len}) + max_new_tokens "
                f"({max_new_tokens}) exceeds the {who}'s reach of {reach} positions (model.max_seq_len).")


def _logits(model, ids: torch.Tensor, cache: KVCache, keep: int) -> torch.Tensor:
    return model(ids, cache=cache, logits_to_keep=keep).logits.float()  # (1, keep, V)


def speculative_greedy(
    target, draft, ids: torch.Tensor, max_new_tokens: int, *, eos_ids: list[int], num_draft: int
) -> tuple[torch.Tensor, list[torch.Tensor], SpeculativeStats]:
    """(sequence (1, L + new), the target's logits (1, V) for every new token, stats). Invariant between
    rounds: each cache holds a prefix of `seq` (never a rejected token); the tokens after it are fed next."""
    seq = ids
    t_cache, d_cache = target.new_cache(), draft.new_cache()
    stats, step_logits = SpeculativeStats(), []
    eos = torch.tensor(eos_ids, dtype=torch.long, device=ids.device)
    prompt_len = ids.shape[1]
    while seq.shape[1] - prompt_len < max_new_tokens:
        remaining = max_new_tokens - (seq.shape[1] - prompt_len)
        k = min(num_draft, remaining - 1)  # the target adds one token of its own per round
        proposal = seq
        for _ in range(k):  # draft greedily, one token at a time on its own cache
            nxt = _logits(draft, proposal[:, d_cache.length:], d_cache, 1)[:, -1].argmax(-1, keepdim=True)
            proposal = torch.cat([proposal, nxt], dim=1)
        drafted = proposal[:, seq.shape[1]:]  # (1, k)
        fresh = proposal[:, t_cache.length:]  # not yet in the target's cache: pending + drafted
        logits = _logits(target, fresh, t_cache, k + 1)  # (1, k + 1, V): after each of the last k + 1 tokens
        stats.target_calls += 1
        choice = logits.argmax(-1)  # (1, k + 1): the target's greedy pick at each draft position
        agree = (choice[:, :k] == drafted)[0].long()
        n = int(agree.cumprod(0).sum())  # leading draft tokens the target agrees with
        stats.proposed += k
        stats.accepted += n
        new = torch.cat([drafted[:, :n], choice[:, n : n + 1]], dim=1)  # (1, n + 1)
        hit = torch.isin(new[0], eos).nonzero()
        if len(hit):
            new = new[:, : int(hit[0]) + 1]
        step_logits += [logits[:, i] for i in range(new.shape[1])]
        seq = torch.cat([seq, new], dim=1)
        t_cache.crop(seq.shape[1] - 1)  # keep accepted drafts; the last token is fed next round
        d_cache.crop(seq.shape[1] - 1)
        if len(hit):
            break
    return seq, step_logits, stats
