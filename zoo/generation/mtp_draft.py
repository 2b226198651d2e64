"""Self-speculation with model.mtp (`generate(..., assistant_model="mtp")`): the model's own multi-token-
prediction modules draft, the model verifies, so no second model is needed (DeepSeek-V3's use of MTP).

Each round the target runs over its fresh tokens (the last emitted token + the drafts) and keeps a prefix of
the drafts plus a token of its own exactly as zoo.generation.speculative does (`accept_drafts`: greedy equals
the target's greedy output; sampling keeps the target's distribution). Its final-normed hidden states at the
kept positions then feed the modules: module 1 reads the hidden state at position t and the embedding of token
t + 1 and proposes token t + 2 at the last position; module k reads module k - 1's output and the token k
places on (a draft token at the newest positions) as in training, so a draft equals what a cache-free
`output_mtp=True` forward over the sequence + the earlier drafts predicts there.

Caches: each module keeps a KV cache of its own over the positions whose token k places on is emitted (no
draft in it); positions that read a draft are fed, then cropped off (`KVCache.crop`) and fed again next
round with the emitted tokens, so every module's cache follows the accepted prefix. Module k's output at its
last kept position is held for module k + 1, which re-reads it next round."""

from __future__ import annotations

import torch

from zoo.generation.logits import Choice
from zoo.generation.speculative import SpeculativeStats, accept_drafts, check_assistant, draft_token
from zoo.modules.cache import KVCache

SELF_DRAFT = "mtp"  # the assistant_model value that drafts with the model's own model.mtp modules


def check_self_draft(model, batch: int, prompt_len: int, max_new_tokens: int, cfg) -> None:
    """One ValueError naming what does not fit, before any work: a model with model.mtp, one prompt, greedy
    or sampling with the dynamic cache (the checks of a separate draft, the model standing in for it)."""
    if getattr(model, "mtp", None) is None:
        raise ValueError(f"assistant_model={SELF_DRAFT!r} drafts with the model's own multi-token-"
                         "prediction modules, and this model has none (model.mtp=null, or loaded with "
                         "from_pretrained(..., mtp=None)); pass a separate assistant_model=<a small "
                         "decoder>, or build the model with model.mtp={name: sequential, depth: ...}.")
    check_assistant(model, model, batch, prompt_len, max_new_tokens, cfg)


class MTPDrafter:
    """The modules of `model.mtp` (the first `depth`) with a KV cache each; `propose` drafts after each
    round."""

    def __init__(self, model, depth: int) -> None:
        self.model, self.modules = model, list(model.mtp.layers)[:depth]
        self.caches = [self._cache() for _ in self.modules]
        # per module: its output (1, n, C) at positions start.. that the next module still has to read
        self.held: list[tuple[torch.Tensor | None, int]] = [(None, 0) for _ in self.modules]

    def _cache(self) -> KVCache:
        cache = KVCache(1)
        cache.keep_states(len(self.modules) + 1)  # a recurrent block rolls back within its last forward
        return cache

    def propose(self, hidden: torch.Tensor, seq: torch.Tensor, k: int,
                choice: Choice) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """`hidden` (1, n, C): the target's final-normed states at the last n kept positions, P - n .. P - 1,
        where `seq` (1, P + 1) ends with the token emitted after position P - 1 -> k drafts (1, k) for tokens
        P + 1 .. P + k (the first k modules) and, sampling, their distributions q."""
        model, end = self.model, seq.shape[1] - 1  # P: positions with a target hidden state
        level, level_start = hidden, end - hidden.shape[1]
        drafted, qs = seq, []
        for j, (module, cache) in enumerate(zip(self.modules[:k], self.caches[:k], strict=True), start=1):
            start = cache.length  # module j's kept positions; it reads token t + j at position t
            tokens = drafted[:, start + j: end + j]  # (1, end - start): a draft where t + j > P
            _, mask, terms = model.embed_and_mask(model.embed, tokens, causal=True, start=start)
            embedded = model.embed.tokens(tokens) * model.embed.scale
            out, normed = module(level[:, start - level_start:], embedded, mask, terms, cache=cache.layers[0])
            cache.length += tokens.shape[1]
            logits = model.head(normed[:, -1:]).float()[:, -1]  # (1, V): token P + j
            drafted = torch.cat([drafted, draft_token(logits, choice, qs)], dim=1)
            held, held_start = self.held[j - 1]
            level = out if held is None else torch.cat([held, out], dim=1)  # positions level_start..P - 1
            level_start = start if held is None else held_start
            kept, after = max(0, end - j + 1), max(0, end - j)  # this module's / the next one's kept length
            self.held[j - 1] = (level[:, after - level_start: kept - level_start], after)
            if kept == 0:
                self.caches[j - 1] = self._cache()
            else:
                cache.crop(kept)  # drop the positions that read a draft token
        return drafted[:, seq.shape[1]:], qs


def mtp_speculative_decode(
    model, ids: torch.Tensor, max_new_tokens: int, *, eos_ids: list[int], num_draft: int,
    choice: Choice | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], SpeculativeStats]:
    """(sequence (1, L + new), the target's raw logits (1, V) for every new token, stats); drafts per round:
    min(num_draft, model.mtp depth). Invariant between rounds: the target's cache holds all of `seq` but its
    last token, fed next round with the drafts."""
    choice = choice or Choice()
    depth = min(num_draft, len(model.mtp.layers))
    drafter, cache = MTPDrafter(model, depth), model.new_cache()
    cache.keep_states(depth + 1)
    stats, step_logits = SpeculativeStats(), []
    eos = torch.tensor(eos_ids, dtype=torch.long, device=ids.device)
    seq, fresh, drafted, qs = ids, ids, ids[:, :0], []
    prompt_len = ids.shape[1]
    while max_new_tokens > 0:
        k = drafted.shape[1]
        out = model(fresh, cache=cache, logits_to_keep=k + 1)
        logits = out.logits.float()  # (1, k + 1, V): after the last fed token and each draft
        new, ended = accept_drafts(logits, drafted, qs, choice, eos, stats, step_logits)
        seq = torch.cat([seq, new], dim=1)
        remaining = max_new_tokens - (seq.shape[1] - prompt_len)
        if ended or remaining <= 0:
            break
        cache.crop(seq.shape[1] - 1)  # the kept drafts stay; the last token is fed next round
        n = new.shape[1] - 1  # drafts kept (no eos cut them: the run goes on)
        kept = out.hidden_states[:, : fresh.shape[1] - k + n]  # (1, n', C): positions up to P - 1
        drafted, qs = drafter.propose(kept, seq, min(depth, remaining - 1), choice)
        fresh = torch.cat([seq[:, -1:], drafted], dim=1)
    return seq, step_logits, stats
