"""Bad requests get OpenAI's 4xx error bodies ({"error": {"message", "type", "param", "code"}}), never a 500;
a full queue answers 429; a request past its timeout 408; a client that goes away frees its row; and the
server keeps answering after all of them."""

from __future__ import annotations

import json
import time

import httpx
import pytest
import torch

from tests.serving.conftest import NAME, serving, tiny

GOOD = {"model": NAME, "prompt": "the cat", "max_tokens": 4}
CHAT = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

# (endpoint, body or raw bytes, status, param, code)
CASES = [
    ("completions", {**GOOD, "model": "gpt-5"}, 404, "model", "model_not_found"),
    ("completions", {**GOOD, "max_tokens": -1}, 400, "max_tokens", "integer_below_min_value"),
    ("chat/completions", {**CHAT, "max_tokens": -3}, 400, "max_tokens", "integer_below_min_value"),
    ("completions", {**GOOD, "prompt": "the cat " * 20}, 400, "prompt", "context_length_exceeded"),
    ("completions", {**GOOD, "max_tokens": 60}, 400, "prompt", "context_length_exceeded"),
    ("chat/completions", {**CHAT, "messages": [{"role": "user", "content": "hello world " * 10}]}, 400,
     "messages", "context_length_exceeded"),
    ("completions", b'{"model": "tiny-zoo", "prompt": ', 400, None, None),
    ("completions", b"\xff\xfe not utf-8", 400, None, None),
    ("completions", b"[1, 2]", 400, None, None),
    ("completions", {**GOOD, "max_tokens": "4"}, 400, "max_tokens", "invalid_type"),
    ("completions", {**GOOD, "max_tokens": 4.5}, 400, "max_tokens", "invalid_type"),
    ("completions", {**GOOD, "temperature": "hot"}, 400, "temperature", "invalid_type"),
    ("completions", {**GOOD, "temperature": 2.5}, 400, "temperature", "decimal_above_max_value"),
    ("completions", {**GOOD, "top_p": 0}, 400, "top_p", "decimal_below_min_value"),
    ("completions", {**GOOD, "stream": "yes"}, 400, "stream", "invalid_type"),
    ("completions", {**GOOD, "n": 0}, 400, "n", "integer_below_min_value"),
    ("completions", {**GOOD, "seed": True}, 400, "seed", "invalid_type"),
    ("completions", {**GOOD, "stop": [1, 2]}, 400, "stop", "invalid_type"),
    ("completions", {**GOOD, "prompt": [1, "a"]}, 400, "prompt", "invalid_type"),
    ("completions", {**GOOD, "prompt": [10**9]}, 400, "prompt", None),
    ("completions", {**GOOD, "prompt": ""}, 400, "prompt", None),
    ("completions", {**GOOD, "best_of": 2}, 400, "best_of", "unsupported_parameter"),
    ("completions", {**GOOD, "echo": "yes"}, 400, "echo", "invalid_type"),
    ("completions", {**GOOD, "logprobs": 6}, 400, "logprobs", "integer_above_max_value"),
    ("chat/completions", {**CHAT, "top_logprobs": 21, "logprobs": True}, 400, "top_logprobs",
     "integer_above_max_value"),
    ("chat/completions", {**CHAT, "top_logprobs": 2}, 400, "top_logprobs", None),
    ("chat/completions", {**CHAT, "logprobs": 1}, 400, "logprobs", "invalid_type"),
    ("completions", {**GOOD, "presence_penalty": 2.5}, 400, "presence_penalty", "decimal_above_max_value"),
    ("completions", {**GOOD, "frequency_penalty": -3}, 400, "frequency_penalty", "decimal_below_min_value"),
    ("completions", {**GOOD, "frequency_penalty": "x"}, 400, "frequency_penalty", "invalid_type"),
    ("completions", {**GOOD, "logit_bias": {"a": 1}}, 400, "logit_bias", "invalid_value"),
    ("completions", {**GOOD, "logit_bias": {"-1": 1}}, 400, "logit_bias", "invalid_value"),
    ("completions", {**GOOD, "logit_bias": {"\u00b2": 1}}, 400, "logit_bias", "invalid_value"),
    ("completions", {**GOOD, "logit_bias": {"3": 101}}, 400, "logit_bias", "invalid_value"),
    ("completions", {**GOOD, "logit_bias": {"3": "1"}}, 400, "logit_bias", "invalid_value"),
    ("completions", {**GOOD, "logit_bias": {"100000": 1}}, 400, "logit_bias", "invalid_value"),
    ("completions", {**GOOD, "logit_bias": [1]}, 400, "logit_bias", "invalid_type"),
    ("completions", {**GOOD, "colour": "red"}, 400, "colour", None),
    ("completions", {"prompt": "x"}, 400, "model", "missing_required_parameter"),
    ("chat/completions", {**CHAT, "messages": "hi"}, 400, "messages", "invalid_type"),
    ("chat/completions", {**CHAT, "messages": [{"role": "robot", "content": "hi"}]}, 400, "messages", None),
    ("chat/completions", {**CHAT, "messages": []}, 400, "messages", None),
    ("chat/completions", {**CHAT, "prompt": "x"}, 400, "prompt", None),
    # issue 41 item 5: were bare text/plain 500s
    ("completions", b'{"model": "tiny-zoo", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, None,
     None),
    ("completions", b'{"model": "tiny-zoo", "prompt": "a\\ud800b"}', 400, "prompt", "invalid_value"),
    ("chat/completions", b'{"model": "tiny-zoo", "messages": [{"role": "user", "content": "\\udfff"}]}', 400,
     "messages", "invalid_value"),
    ("completions", b'{"model": "tiny-zoo", "prompt": "a", "max_tokens": 1' + b"0" * 5000 + b"}", 400, None,
     None),
    ("completions", {**GOOD, "logit_bias": {"1" * 5000: 1}}, 400, "logit_bias", "invalid_value"),
]


@pytest.mark.parametrize(("endpoint", "body", "status", "param", "code"), CASES,
                         ids=[f"{i}-{c[3]}-{c[4]}" for i, c in enumerate(CASES)])
def test_bad_request_gets_openai_error(server, endpoint, body, status, param, code):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{server[0]}/{endpoint}", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert (error["param"], error["code"]) == (param, code)
    assert error["type"] == "invalid_request_error"


def test_openai_client_raises_its_own_error_classes(client):
    import openai

    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x")
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model=NAME, prompt="x", max_tokens=-1)


def test_unknown_url_and_method_are_openai_errors(server):
    r = httpx.get(f"{server[0]}/nothing")
    assert r.status_code == 404 and "error" in r.json()
    r = httpx.get(f"{server[0]}/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_full_queue_answers_429_then_drains():
    model, tok = tiny()
    with serving(model, tok, start=False, max_batch=1, max_queue=1) as (url, served):
        with httpx.Client(base_url=url, timeout=30) as http, \
                http.stream("POST", "/completions", json={**GOOD, "stream": True}) as first:
            deadline = time.monotonic() + 10
            while served.engine.load() != (0, 1) and time.monotonic() < deadline:
                time.sleep(0.01)
            second = http.post("/completions", json=GOOD)  # the engine is not running: still queued
            assert second.status_code == 429
            assert second.json()["error"]["code"] == "rate_limit_exceeded"
            served.engine.start()
            assert first.status_code == 200 and "data: [DONE]" in first.read().decode()
            assert http.post("/completions", json=GOOD).status_code == 200


def _slow(model, seconds: float):
    """A forward hook that makes every step take at least `seconds` (a model slow enough to interrupt)."""
    return model.register_forward_hook(lambda *_: time.sleep(seconds))


def test_client_that_disconnects_mid_stream_frees_its_row():
    model, tok = tiny(max_seq_len=512)
    hook = _slow(model, 0.01)
    try:
        with serving(model, tok) as (url, served):
            body = {**GOOD, "max_tokens": 400, "stream": True}
            with httpx.stream("POST", f"{url}/completions", json=body, timeout=30) as r:
                lines = r.iter_lines()
                for _ in range(3):  # a few chunks arrived: the row is in the running batch
                    next(lines)
                assert served.engine.load()[0] == 1
            deadline = time.monotonic() + 20
            while served.engine.load() != (0, 0) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert served.engine.load() == (0, 0)
            assert served.engine.steps < 400  # it left long before its budget
            assert httpx.post(f"{url}/completions", json=GOOD, timeout=30).status_code == 200
    finally:
        hook.remove()


def test_request_past_its_timeout_gets_408():
    model, tok = tiny(max_seq_len=512)
    hook = _slow(model, 0.1)
    try:
        with serving(model, tok, timeout=0.25) as (url, _):
            r = httpx.post(f"{url}/completions", json={**GOOD, "max_tokens": 300}, timeout=30)
            assert r.status_code == 408 and r.json()["error"]["code"] == "timeout"
            r = httpx.post(f"{url}/completions", json={**GOOD, "max_tokens": 1}, timeout=30)
            assert r.status_code == 200
    finally:
        hook.remove()


def test_max_tokens_zero_and_n_choices(server):
    r = httpx.post(f"{server[0]}/completions", json={**GOOD, "max_tokens": 0}).json()
    assert r["choices"][0]["text"] == "" and r["usage"]["completion_tokens"] == 0
    body = {**GOOD, "prompt": ["a", "the"], "n": 2, "seed": 0}
    r = httpx.post(f"{server[0]}/completions", json=body).json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    assert r["usage"]["prompt_tokens"] == 4


def test_engine_failure_is_a_500_and_the_server_goes_on(server):
    _, served, model, _ = server
    hook = model.register_forward_pre_hook(lambda *_: torch.tensor([]).item())  # any forward fails
    try:
        r = httpx.post(f"{server[0]}/completions", json=GOOD, timeout=30)
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    finally:
        hook.remove()
    assert httpx.post(f"{server[0]}/completions", json=GOOD, timeout=30).status_code == 200


@pytest.mark.parametrize(("field", "value", "message"), [
    ("suffix", "x", "'suffix'=\"x\" is not supported by this server; leave it out (or null)."),
    ("best_of", 2, "'best_of'=2 is not supported by this server; leave it out (or 1)."),
])
def test_an_unsupported_value_is_named_in_json(field, value, message):
    """A client writes JSON: the refusal shows the value and the allowed one as JSON (null, not None)."""
    from zoo.serving.completion import Completion
    from zoo.serving.protocol import APIError

    with pytest.raises(APIError) as caught:
        Completion().read_request({**GOOD, field: value})
    assert (caught.value.status, caught.value.message) == (400, message)
