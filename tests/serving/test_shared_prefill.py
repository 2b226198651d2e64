"""Rows that join the engine together with the same prompt (a request's `n` choices, a GRPO group) share one
prefill row: the prefill forward sees each distinct prompt once, its logits and cache rows (K/V, MLA's latent,
a recurrent mixer's state) are copied to every row of the group, and each row still samples from its own
generator, so it gets `model.generate`'s tokens for its prompt alone with its seed. When the batched prefill
raises, each distinct prompt is retried alone: a failing prompt ends its rows only."""

from __future__ import annotations

import pytest
import torch

from tests.generation.test_latent_cache import pair
from tests.modules.test_hybrid import _model as gdn_hybrid
from tests.modules.test_short_conv_model import model as conv_hybrid
from tests.serving.test_engine import decoder
from zoo.generation.config import GenerationConfig
from zoo.generation.continuous.engine import Engine, Sequence

A, B = [5, 6, 7, 8, 9], [11, 12, 13]  # two lengths: the unique prompts are left-padded together
PROMPTS = [A, B, A, B, A, B, A, B]  # 2 prompts x 4 rows, interleaved: the copies must follow each row
NEW = 6


def options(row: int) -> dict:
    return dict(do_sample=True, temperature=0.9, seed=100 + row)


def run(model, prompts: list[list[int]], events: list[list[tuple]], engine: Engine) -> list[Sequence]:
    """Every prompt a row, all joining at the first step; stepped until all ended."""
    seqs = [Sequence(p, NEW, GenerationConfig(**options(r)).choice("cpu"), frozenset(),
                     lambda token, finish, _lp, r=r: events[r].append((token, finish)))
            for r, p in enumerate(prompts)]
    with torch.inference_mode():
        engine.step(seqs)
        for _ in range(3 * NEW):
            if all(s.done for s in seqs):
                break
            engine.step([])
    return seqs


def prefill_rows(model) -> list[int]:
    """Records the rows of every forward call of more than one position (a prefill; a decode step has one)."""
    seen: list[int] = []

    def hook(_module, args, kwargs):
        ids = args[0] if args else kwargs["input_ids"]
        if ids.shape[1] > 1:
            seen.append(ids.shape[0])

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def alone(model, prompt: list[int], row: int) -> list[int]:
    out = model.generate([prompt], max_new_tokens=NEW, eos_token_id=[], **options(row))
    return out[0, len(prompt):].tolist()


WIDE = dict(init_std=0.2, tie_embeddings=False)  # tokens that depend on the prompt: a wrong copy shows


@pytest.mark.parametrize("build", [
    lambda: decoder("rope", **WIDE),
    lambda: decoder("rope", mixer={"sliding_window": 4}, **WIDE),
    lambda: pair(**WIDE)[0],  # MLA, cache=latent: latent and rope key in the key slot, an empty value slot
    lambda: gdn_hybrid(vocab_size=96),  # gated_deltanet layers (recurrent state) beside attention
    lambda: conv_hybrid(vocab_size=96),  # short_conv layers (a convolution window) beside attention
], ids=["plain", "sliding_window", "mla_latent", "gated_deltanet_hybrid", "short_conv_hybrid"])
def test_a_group_is_prefilled_once_and_each_row_gets_its_alone_tokens(build):
    model = build()
    seen = prefill_rows(model)
    events: list[list[tuple]] = [[] for _ in PROMPTS]
    run(model, PROMPTS, events, Engine(model, pad_id=0))
    assert seen == [2]  # one prefill forward, of the 2 distinct prompts (8 rows before)
    got = [[t for t, _ in row if t is not None] for row in events]
    expected = [alone(model, p, r) for r, p in enumerate(PROMPTS)]
    assert got == expected
    assert len({tuple(got[r]) for r in (0, 2, 4, 6)}) > 1  # the rows of one prompt drew apart


def test_a_failing_prompt_is_retried_once_and_ends_all_its_rows_only():
    """The batched prefill raises because of prompt A: B is prefilled alone once for its two rows, which get
    their tokens; both rows of A end with the server's error."""
    model = decoder("rope")
    engine = Engine(model, pad_id=0)
    real = engine.batch.prefill

    def prefill(prompts):
        if A in prompts:
            raise RuntimeError("injected prefill failure")
        return real(prompts)

    engine.batch.prefill = prefill
    seen = prefill_rows(model)
    prompts = [A, B, A, B]
    events: list[list[tuple]] = [[] for _ in prompts]
    seqs = run(model, prompts, events, engine)
    assert seen == [1]  # B's one forward row (one per row of B before)
    for r in (0, 2):
        assert events[r] == [(None, "error")] and "injected prefill failure" in seqs[r].error.message
    for r in (1, 3):
        assert [t for t, _ in events[r]] == alone(model, B, r) and events[r][-1][1] == "length"
