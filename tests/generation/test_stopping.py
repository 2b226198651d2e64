"""Stop strings in `generate`: each row ends at the first token after which its decoded continuation contains
a stop string, with the tokens of a run without stop strings up to there (pads after), and the loop runs only
as many forward steps as the last row needs. The reference is worked out by hand from the free run's tokens
and a decode function written here (some tokens decode to nothing, some to two characters)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.generation.conftest import tiny_decoder
from tests.modules.test_hybrid import GDN
from zoo.generation.stopping import RowStop, StopStrings, overlap_free

LETTERS = "abcde"


def decode(ids: list[int]) -> str:
    """Token t -> LETTERS[t % 5] repeated t % 3 times: tokens of 0, 1 or 2 characters."""
    return "".join(LETTERS[t % 5] * (t % 3) for t in ids)


TOKENIZER = SimpleNamespace(decode=decode)
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [14, 15, 16, 17]]
BUDGET = 30


class Forwards:
    """Counts the model's forward calls (one per generated token with a KV cache)."""

    def __init__(self, model) -> None:
        self.calls = 0
        self.handle = model.register_forward_hook(self._hook)

    def _hook(self, *_args) -> None:
        self.calls += 1


def stop_step(tokens: list[int], stops: list[str]) -> int:
    """By hand: how many tokens a row keeps, the first prefix whose text contains a stop (else all)."""
    for k in range(1, len(tokens) + 1):
        if any(s in decode(tokens[:k]) for s in stops):
            return k
    return len(tokens)


@pytest.mark.parametrize("options", [
    dict(),
    dict(do_sample=True, temperature=1.5, seed=3),
    dict(do_sample=True, temperature=1.5, seed=3, num_return_sequences=2),
    dict(cache_implementation="static"),
], ids=["greedy", "sampled", "two-samples", "static-cache"])
@pytest.mark.parametrize("layers", [
    {},  # attention only
    dict(linear_mixer=GDN, layer_pattern=["linear", "full"]),  # a recurrent state beside the keys and values
    dict(linear_mixer={"name": "short_conv"}, layer_pattern=["linear", "full"]),  # a convolution window
], ids=["attention", "gated_deltanet-hybrid", "short_conv-hybrid"])
def test_rows_stop_at_their_stop_string_and_the_loop_ends_with_the_last(options, layers):
    model = tiny_decoder("rope", max_seq_len=64, **layers)
    free = model.generate(PROMPTS, max_new_tokens=BUDGET, eos_token_id=[], **options)
    width = max(map(len, PROMPTS))
    rows = free[:, width:].tolist()
    texts = [decode(r) for r in rows]
    stops = [t[2 + 3 * i : 5 + 3 * i] for i, t in enumerate(texts)]  # from each row, later and later
    keep = [stop_step(r, stops) for r in rows]
    assert min(keep) < max(keep) < BUDGET  # rows end apart, all before the budget
    counter = Forwards(model)
    out = model.generate(PROMPTS, max_new_tokens=BUDGET, eos_token_id=[], stop_strings=stops,
                         tokenizer=TOKENIZER, **options)
    counter.handle.remove()
    assert out.shape[1] == width + max(keep)
    if "cache_implementation" not in options:  # the static cache's fused step bypasses module hooks
        assert counter.calls == max(keep)
    pad = model.config.pad_id
    for row, free_row, k in zip(out[:, width:].tolist(), rows, keep, strict=True):
        assert row == free_row[:k] + [pad] * (max(keep) - k)
        assert cut(decode(row[:k]), stops) == cut(decode(free_row), stops)  # the text callers keep


def cut(text: str, stops: list[str]) -> str:
    """The text before the first stop string (lm-eval's and the server's cut)."""
    for s in stops:
        text = text.split(s)[0]
    return text


def test_eos_and_stop_strings_both_end_rows():
    model = tiny_decoder("rope", max_seq_len=64)
    free = model.generate(PROMPTS, max_new_tokens=BUDGET, eos_token_id=[])[:, 6:].tolist()
    eos = free[1][4]  # row 1's fifth token as its EOS (row 1 ends there unless it stops earlier)
    stops = [decode(free[0])[2:4]]
    out = model.generate(PROMPTS, max_new_tokens=BUDGET, eos_token_id=eos, stop_strings=stops,
                         tokenizer=TOKENIZER)[:, 6:].tolist()
    ends = [min(stop_step(r, stops), r.index(eos) + 1 if eos in r else BUDGET) for r in free]
    assert len(out[0]) == max(ends)
    for row, free_row, k in zip(out, free, ends, strict=True):
        assert row[:k] == free_row[:k]


def test_a_stop_split_over_tokens_that_decode_to_nothing_is_found_and_only_in_the_continuation():
    row = RowStop(["ab"], decode)
    # 'a' (1 character), then 30 tokens of no text (t % 3 == 0), then 'b'
    assert [row.add(t) for t in [10, *[3] * 30, 1]] == [False] * 31 + [True]
    batch = StopStrings("ab", decode)  # the prompt is never read: only tokens fed through update
    hits = batch.update(torch.tensor([10, 10]), torch.tensor([False, True]))
    assert hits.tolist() == [False, False]
    assert batch.update(torch.tensor([1, 1]), torch.tensor([False, True])).tolist() == [True, False]


def test_a_window_hit_is_confirmed_on_the_whole_text():
    """A decode that writes a marker at the start of whatever it is given: the tail window contains 'X!'
    but the whole continuation does not, so the row goes on."""
    row = RowStop(["X!"], lambda ids: ("X" if len(ids) == 10 else "") + "!" * len(ids))  # window: 2 + 8
    row.ids = [1] * 10
    assert not row.add(1)


def test_refusals_name_what_is_wrong():
    model = tiny_decoder("rope", max_seq_len=64)
    with pytest.raises(ValueError, match="stop_strings needs tokenizer="):
        model.generate(PROMPTS, stop_strings=["a"])
    with pytest.raises(ValueError, match="beam search and speculative decoding do not take it"):
        model.generate(PROMPTS, stop_strings=["a"], tokenizer=TOKENIZER, num_beams=2)
    for bad in ("", [], ["a", ""], [3]):
        with pytest.raises(ValueError, match="stop_strings must be a non-empty string or a list of them"):
            model.generate(PROMPTS, stop_strings=bad, tokenizer=TOKENIZER)


def test_overlap_free_by_hand():
    assert overlap_free(["\n\n", "Question:", "</s>"])
    assert overlap_free(["aa"])  # one string overlapping itself: its first completion is its first start
    assert not overlap_free(["\n", "\n\n"])  # one inside the other
    assert not overlap_free(["ion:", "Question"])  # 'Question' ends with 'ion', the start of 'ion:'
    assert not overlap_free(["ab", "bc"])
