"""The continuous-batching engine without HTTP: rows that join at different step boundaries and leave at
different lengths get exactly the tokens `model.generate` gives each prompt alone, for every positional
scheme (the batch keeps each row right-aligned, so positions, ALiBi distances and sliding windows are as in
a left-padded generate), greedy and seeded sampling rows side by side."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.generation.config import GenerationConfig
from zoo.generation.continuous.engine import Engine, Sequence

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [20, 21], [30, 31, 32]]
LENGTHS = [10, 4, 12, 6, 9, 5]
JOIN_AT = [0, 0, 2, 3, 7, 7]  # the step boundary at which each request arrives
SAMPLED = {1: 3, 4: 11}  # row -> seed: these rows sample (temperature 0.8, top_p 0.9), the others are greedy


def decoder(positional: str, **overrides):
    torch.manual_seed(0)
    cfg = dict(arch="decoder", vocab_size=40, d_model=32, n_layers=2, n_heads=4, positional=positional,
               max_seq_len=32, dropout=0.0)
    return zoo.build({**cfg, **overrides}).eval()


def options(i: int) -> dict:
    return (dict(do_sample=True, temperature=0.8, top_p=0.9, seed=SAMPLED[i]) if i in SAMPLED else {})


def run_engine(model, max_batch: int = 8) -> list[list[int]]:
    got: list[list[int]] = [[] for _ in PROMPTS]
    seqs = [Sequence(p, n, GenerationConfig(**options(i)).choice("cpu"), frozenset(),
                     lambda token, finish, _logprob, i=i: got[i].append(token))
            for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS, strict=True))]
    engine = Engine(model, pad_id=0, max_batch=max_batch)
    waiting = list(range(len(PROMPTS)))
    with torch.inference_mode():
        for boundary in range(100):
            free = max_batch - len([s for s in engine.rows if not s.done])
            arrived = [i for i in waiting if JOIN_AT[i] <= boundary][:free]
            waiting = [i for i in waiting if i not in arrived]
            engine.step([seqs[i] for i in arrived])
            if not waiting and all(s.done for s in engine.rows):
                break
    return got


@pytest.mark.parametrize(("positional", "overrides"), [
    ("rope", {}), ("learned", {}), ("alibi", {}), ("sinusoidal", {}),
    ("rope", {"mixer": {"sliding_window": 4}}),
    ("rope", {"n_kv_heads": 2}),
])
def test_joining_and_leaving_rows_get_their_alone_tokens(positional, overrides):
    model = decoder(positional, **overrides)
    expected = [model.generate([p], max_new_tokens=n, eos_token_id=[], **options(i))[0, len(p):].tolist()
                for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS, strict=True))]
    assert run_engine(model) == expected


def test_a_full_batch_makes_requests_wait_and_gives_the_same_tokens():
    model = decoder("rope")
    alone = [model.generate([p], max_new_tokens=n, eos_token_id=[], **options(i))[0, len(p):].tolist()
             for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS, strict=True))]
    assert run_engine(model, max_batch=2) == alone


def test_rows_stop_at_their_stop_ids_and_budget():
    model = decoder("rope")
    first = model.generate([[5, 6, 7]], max_new_tokens=6, eos_token_id=[])[0, 3:].tolist()
    events = []
    seq = Sequence([5, 6, 7], 6, GenerationConfig().choice("cpu"), frozenset([first[2]]),
                   lambda token, finish, _logprob: events.append((token, finish)))
    engine = Engine(model, pad_id=0)
    with torch.inference_mode():
        engine.step([seq])
        while not seq.done:
            engine.step([])
        engine.step([])
    k = first.index(first[2])  # the first time the stop id comes
    assert events == [(t, None) for t in first[:k]] + [(first[k], "stop")] and engine.rows == []
    assert engine.batch.cache is None and engine.batch.size == 0


def test_a_stop_string_ends_its_row_at_the_token_that_completes_it():
    """The row leaves the batch at its stop string: decode steps counted, not the max_tokens budget."""
    from zoo.generation.stopping import RowStop

    model = decoder("rope")
    first = model.generate([[5, 6, 7]], max_new_tokens=20, eos_token_id=[])[0, 3:].tolist()

    def decode(ids: list[int]) -> str:
        return "".join(chr(97 + t % 26) for t in ids)

    stop = decode(first[4:6])
    k = next(n for n in range(1, 21) if stop in decode(first[:n]))  # by hand: tokens up to the stop's end
    events = []
    seq = Sequence([5, 6, 7], 20, GenerationConfig().choice("cpu"), frozenset(),
                   lambda token, finish, _logprob: events.append((token, finish)),
                   stop=RowStop([stop], decode))
    engine = Engine(model, pad_id=0)
    with torch.inference_mode():
        engine.step([seq])
        while not seq.done:
            engine.step([])
    assert events == [(t, None) for t in first[: k - 1]] + [(first[k - 1], "stop")]
    assert engine.steps == k - 1 < 19  # the prefill gave the first token; one decode step per token after
