"""generate_until stops decoding at a stop string: the text is the full-budget run's text cut before the stop
string, and the model runs only as many forward steps as the batch's last row needs (counted)."""

from __future__ import annotations

import torch
from lm_eval.api.instance import Instance

import zoo
from zoo.lm_eval.model import ZooLM
from zoo.tokenizers import build_tokenizer

BUDGET = 40


def test_generate_until_stops_at_the_stop_string_with_the_full_runs_text():
    tokenizer = build_tokenizer({"name": "char"}, ["abc de fgh"])
    torch.manual_seed(0)
    model = zoo.build("gpt2", vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                      max_seq_len=64)
    lm = ZooLM.from_model(model, tokenizer, batch_size=2, device="cpu")
    contexts = ["abc", "de f"]  # greedy: 'ccc...' and 'f' * 22 + 'c' * 18

    def run(until: list[str]) -> list[str]:
        args = {"until": until, "max_gen_toks": BUDGET}
        return lm.generate_until([Instance("generate_until", {}, (c, args), 0) for c in contexts])

    free = run([])
    assert len(free[1]) == BUDGET  # without stop strings the batch runs the whole budget
    stops = [free[0][3:6], free[1][:20]]  # the rows stop after 3 and 20 tokens (a character a token)
    assert run_counted(model, lambda: run(stops)) == (cut(free, stops), 20)
    # 'ffffcc' ends with the start of 'ccc': the first stop to complete need not be the first to begin, so
    # the batch runs the full budget and is cut as lm-eval cuts
    overlapping = [free[0][3:6], free[1][18:24]]
    assert run_counted(model, lambda: run(overlapping)) == (cut(free, overlapping), BUDGET)


def run_counted(model, run):
    """(what `run()` returns, the model's forward calls during it)."""
    calls = []
    handle = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        return run(), len(calls)
    finally:
        handle.remove()


def cut(texts: list[str], stops: list[str]) -> list[str]:
    """lm-eval's cut: each text split at each stop string in turn."""
    out = []
    for text in texts:
        for s in stops:
            text = text.split(s)[0]
        out.append(text)
    return out
