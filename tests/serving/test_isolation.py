"""One row's failure ends only that row: the other rows of the running batch keep decoding and still get
`model.generate`'s tokens, the failing row's request gets its own error (400 when its own sampling settings
left no distribution to sample, 500 otherwise), and the engine serves on. Failures are injected into one
row's own steps (its sampling, its stop-string decode, its prefill), while other rows run beside it."""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import torch

from tests.serving.conftest import NAME, reference, serving, tiny
from tests.serving.test_engine import decoder, options
from zoo.generation.config import GenerationConfig
from zoo.generation.continuous.engine import Engine, Sequence
from zoo.generation.stopping import RowStop

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14], [3, 4, 5, 6]]
LENGTHS = [10, 8, 12, 9]
SAMPLED = {1: 3, 4: 11}  # test_engine's: row -> seed (rows 1 and 4 sample)


def alone(model, i: int) -> list[int]:
    p, n = PROMPTS[i], LENGTHS[i]
    return model.generate([p], max_new_tokens=n, eos_token_id=[], **options(i))[0, len(p):].tolist()


def rows(events: list[list[tuple]]) -> list[Sequence]:
    return [Sequence(p, n, GenerationConfig(**options(i)).choice("cpu"), frozenset(),
                     lambda token, finish, _lp, i=i: events[i].append((token, finish)))
            for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS, strict=True))]


def drive(engine: Engine, seqs: list[Sequence], join_at: list[int]) -> None:
    """Step the engine, each sequence joining at its boundary, until every one has finished."""
    with torch.inference_mode():
        for boundary in range(100):
            engine.step([s for s, at in zip(seqs, join_at, strict=True) if at == boundary])
            if boundary >= max(join_at) and all(s.done for s in seqs):
                return
    raise AssertionError("the engine did not finish")


def tokens(events: list[tuple]) -> list[int]:
    return [t for t, _ in events if t is not None]


def test_a_row_whose_sampling_raises_ends_alone_and_the_others_get_their_tokens():
    model = decoder("rope")
    events: list[list[tuple]] = [[] for _ in PROMPTS]
    seqs = rows(events)
    calls = []

    def draw(probs, real=seqs[1].choice.draw):  # row 1 samples; its third draw fails
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected sampling failure")
        return real(probs)

    seqs[1].choice.draw = draw
    engine = Engine(model, pad_id=0)
    drive(engine, seqs, [0, 0, 1, 2])
    assert events[1][-1] == (None, "error") and tokens(events[1]) == alone(model, 1)[:2]
    assert not seqs[1].error.by_request and "injected sampling failure" in seqs[1].error.message
    for i in (0, 2, 3):
        assert tokens(events[i]) == alone(model, i) and events[i][-1][1] == "length"
    after: list[list[tuple]] = [[] for _ in PROMPTS]  # the engine serves on
    drive(engine, rows(after), [0, 0, 0, 0])
    assert [tokens(e) for e in after] == [alone(model, i) for i in range(len(PROMPTS))]


def test_a_row_whose_stop_string_decode_raises_ends_alone():
    model = decoder("rope")
    events: list[list[tuple]] = [[] for _ in PROMPTS]
    seqs = rows(events)

    def decode(ids: list[int]) -> str:
        if len(ids) == 4:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected decode failure")
        return "".join(chr(97 + t % 26) for t in ids)

    seqs[2].stop = RowStop(["never"], decode)
    drive(Engine(model, pad_id=0), seqs, [0, 1, 0, 3])
    assert events[2][-1] == (None, "error") and tokens(events[2]) == alone(model, 2)[:3]
    assert not seqs[2].error.by_request and "UnicodeDecodeError" in seqs[2].error.message
    for i in (0, 1, 3):
        assert tokens(events[i]) == alone(model, i) and events[i][-1][1] == "length"


def test_settings_that_leave_no_distribution_end_their_row_with_a_request_error():
    """A sampled row whose own processing turns the model's finite logits into NaN: its request's fault."""
    model = decoder("rope")
    events: list[list[tuple]] = [[] for _ in PROMPTS]
    seqs = rows(events)
    seqs[1].choice.processors.append(lambda logits: logits * float("nan"))
    drive(Engine(model, pad_id=0), seqs, [0, 0, 0, 2])
    assert events[1] == [(None, "error")] and seqs[1].error.by_request
    assert "no probability distribution (NaN)" in seqs[1].error.message
    for i in (0, 2, 3):
        assert tokens(events[i]) == alone(model, i)


def test_a_failing_prefill_retries_row_by_row_and_ends_only_the_culprit():
    """The joining rows' prefill raises because of one prompt: the running rows are not touched, the other
    joining rows join from prefills of their own, the culprit ends with a server error."""
    model = decoder("rope")
    events: list[list[tuple]] = [[] for _ in PROMPTS]
    seqs = rows(events)
    engine = Engine(model, pad_id=0)
    real = engine.batch.prefill

    def prefill(prompts):
        if PROMPTS[3] in prompts:
            raise RuntimeError("injected prefill failure")
        return real(prompts)

    engine.batch.prefill = prefill
    drive(engine, seqs, [0, 0, 2, 2])  # rows 2 and 3 join together while 0 and 1 run
    assert events[3] == [(None, "error")] and "injected prefill failure" in seqs[3].error.message
    for i in (0, 1, 2):
        assert tokens(events[i]) == alone(model, i) and events[i][-1][1] == "length"


def test_through_the_server_one_failing_request_leaves_the_others_streaming(monkeypatch):
    """Four requests decode in one batch; one's sampling raises mid-stream (500), one's settings leave no
    distribution (400); the other two finish with model.generate's text, and the server answers afterwards."""
    import zoo.serving.app as app

    real = app.choice_for

    def choice_for(req, k, device="cpu"):
        choice = real(req, k, device)
        if req.seed == 666:  # fails at its third draw
            draws, draw = [], choice.draw

            def failing(probs):
                draws.append(1)
                if len(draws) == 3:
                    raise RuntimeError("injected")
                return draw(probs)

            choice.draw = failing
        if req.seed == 667:
            choice.processors.append(lambda logits: logits * float("nan"))
        return choice

    monkeypatch.setattr(app, "choice_for", choice_for)
    model, tok = tiny()
    greedy = {"model": NAME, "prompt": "the cat", "max_tokens": 12, "temperature": 0}
    sampled = {"model": NAME, "prompt": "a dog", "max_tokens": 10, "temperature": 0.8, "seed": 5}
    bodies = [greedy, {**sampled, "stream": True}, {**sampled, "seed": 666, "stream": True},
              {**sampled, "seed": 667}]
    with serving(model, tok, start=False) as (url, served), httpx.Client(base_url=url, timeout=60) as http:
        def post(body):
            if not body.get("stream"):
                return http.post("/completions", json=body)
            with http.stream("POST", "/completions", json=body) as r:
                return r.status_code, [line for line in r.iter_lines() if line]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(post, b) for b in bodies]
            deadline = time.monotonic() + 30
            while served.engine.load() != (0, 4) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert served.engine.load() == (0, 4)  # all four wait: they join the batch together
            served.engine.start()
            first, second, failing, no_distribution = (f.result() for f in futures)
        ids = [tok.encode(b["prompt"]) for b in bodies]
        assert first.status_code == 200
        assert first.json()["choices"][0]["text"] == reference(model, tok, ids[0], 12)
        status, lines = second
        text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in lines
                       if line.startswith("data: {") and '"choices": [{' in line)
        assert status == 200 and lines[-1] == "data: [DONE]"
        assert text == reference(model, tok, ids[1], 10, do_sample=True, temperature=0.8, seed=5)
        status, lines = failing
        errors = [line for line in lines if '"error"' in line]
        assert status == 200 and len(errors) == 1
        assert '"server_error"' in errors[0] and "injected" in errors[0]
        assert no_distribution.status_code == 400
        error = no_distribution.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "no probability distribution (NaN)" in error["message"] and "temperature" in error["message"]
        after = http.post("/completions", json=greedy)
        assert after.status_code == 200
        assert after.json()["choices"][0]["text"] == reference(model, tok, ids[0], 12)


def test_a_stream_whose_text_fails_gets_an_error_event_and_the_other_stream_finishes(monkeypatch):
    """Detokenising one request's stream raises on the event loop's side: that stream ends with OpenAI's
    error event and [DONE], its rows are freed, and a stream beside it still gets model.generate's text."""
    import zoo.serving.run as run

    class Failing(run.ChoiceText):
        def add(self, token, final):
            if len(self.ids) == 3:
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected")
            return super().add(token, final)

    real = run.ChoiceText
    def choice_text(decode, stops):
        return (Failing if stops == ["zzz"] else real)(decode, stops)

    monkeypatch.setattr(run, "ChoiceText", choice_text)
    model, tok = tiny()
    body = {"model": NAME, "prompt": "the cat", "max_tokens": 12, "temperature": 0, "stream": True}
    with serving(model, tok) as (url, served), httpx.Client(base_url=url, timeout=60) as http:
        def stream(body):
            with http.stream("POST", "/completions", json=body) as r:
                return r.status_code, [line for line in r.iter_lines() if line]

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            failing, other = pool.map(stream, [{**body, "stop": ["zzz"]}, body])
        assert failing[0] == 200 and failing[1][-1] == "data: [DONE]"
        error = json.loads(failing[1][-2][6:])["error"]
        assert error["type"] == "server_error" and "UnicodeDecodeError" in error["message"]
        text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in other[1]
                       if '"choices": [{' in line)
        assert other[0] == 200 and text == reference(model, tok, tok.encode("the cat"), 12)
        deadline = time.monotonic() + 10
        while served.engine.load() != (0, 0) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert served.engine.load() == (0, 0)
