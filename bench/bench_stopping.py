"""Stop strings stop generation (lm-eval's generate_until, the server's `stop`): before, generation ran the
whole token budget and the text was cut at the stop string afterwards; now each row stops at the token that
completes its stop string and the batch ends with its last row (zoo.generation.stopping). Both sides run
`model.generate` on the same prompts (a random-weight `llama_small` over a character vocabulary, greedy),
with each row's stop string taken from its own free-running text at a different depth, so rows end apart;
the texts after the cut are checked equal before timing.

    python -m bench.run --sections stopping
"""

from __future__ import annotations

import functools

import torch

import zoo
from bench.common import Section, interleaved, markdown_table
from zoo.data import TOKENIZERS

SIZES = {False: dict(budget=256, batches=(1, 8), repeats=3), True: dict(budget=16, batches=(1, 2), repeats=1)}
TEXT = ["the quick brown fox jumps over the lazy dog", "Question: what is two plus two?\nAnswer: four\n"]


def cut(text: str, stops: list[str]) -> str:
    for s in stops:
        text = text.split(s)[0]
    return text


def first_new(text: str, depth: int) -> str | None:
    """The shortest piece of `text` (3 to 12 characters) starting at or after `depth` whose first occurrence
    is there."""
    for k in range(3, 13):
        for p in range(depth, len(text) - k + 1):
            if text.find(text[p : p + k]) == p:
                return text[p : p + k]
    return None


def generate(model, tok, prompts: list[list[int]], budget: int, stops: list[str],
             stop: bool) -> tuple[list[str], int]:
    """(each row's text cut at the stop strings, forward steps run): with stop strings or the full budget."""
    options = dict(stop_strings=stops, tokenizer=tok) if stop else {}
    out = model.generate(prompts, max_new_tokens=budget, eos_token_id=[], **options)
    width = max(map(len, prompts))
    return [cut(tok.decode(r), stops) for r in out[:, width:].tolist()], out.shape[1] - width


def run(quick: bool = False) -> Section:
    size = SIZES[quick]
    budget = size["budget"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: two oversubscribe this shared 2-core machine (bench/decoding)
    try:
        return _run(size, budget)
    finally:
        torch.set_num_threads(threads)


def _run(size: dict, budget: int) -> Section:
    tok = TOKENIZERS["char"](TEXT)
    torch.manual_seed(0)
    model = zoo.build("llama_small", vocab_size=tok.vocab_size, max_seq_len=budget + 32).eval()
    rows = []
    for batch in size["batches"]:
        prompts = [tok.encode(TEXT[i % 2][: 8 + i]) for i in range(batch)]
        width = max(map(len, prompts))
        texts = [tok.decode(r) for r in model.generate(prompts, max_new_tokens=budget,
                                                       eos_token_id=[])[:, width:].tolist()]
        # row i's stop string: the first piece of its own text from a depth between 1/8 and 1/2 of it on that
        # does not occur earlier (random weights repeat themselves), so the rows end apart
        depths = [len(t) * (1 + 3 * i // max(batch - 1, 1)) // 8 for i, t in enumerate(texts)]
        stops = [s for t, d in zip(texts, depths, strict=True) if (s := first_new(t, d))]
        full = functools.partial(generate, model, tok, prompts, budget, stops, False)
        stopping = functools.partial(generate, model, tok, prompts, budget, stops, True)
        (want, _), (got, steps) = full(), stopping()
        assert got == want, "stop strings changed the text"
        timing = interleaved({"full": full, "stop": stopping}, repeats=size["repeats"])
        ratio = timing["full"].median / timing["stop"].median
        rows.append([batch, budget, steps, f"{timing['full'].median * 1e3:.0f}",
                     f"{timing['stop'].median * 1e3:.0f}", f"{ratio:.2f}x"])
    notes = ["steps: forward steps the stopping side ran (the batch ends with its last row's stop); the "
             "full side always runs the budget. Same text after the cut on both sides (checked). One torch "
             "thread.",
             "The saving is budget / steps less the check: each row's last few tokens are decoded after "
             "every token (about 0.1 ms per step for 8 rows here), so a stop string found late saves little."]
    table = markdown_table(["batch", "budget (tokens)", "steps with stop strings",
                            "full budget then cut (ms)", "stop strings (ms)", "speed-up"], rows)
    return Section("Stop strings stop generation", table, notes)


if __name__ == "__main__":
    print(run().markdown())
