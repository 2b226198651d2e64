"""No request stalls the others (issue 41, items 2, 5 and 8): a chat template that loops forever, raises a
Python error or allocates without bound, and a 10 MB prompt, are prepared in worker processes within a time
and memory budget and refused with their own 4xx, while other clients' requests keep their idle latency;
bodies past the size limit get 413, non-JSON content types 415, and a server with an API key 401 without
it."""

from __future__ import annotations

import json
import statistics
import threading
import time

import httpx
import pytest

from tests.serving.conftest import NAME, serving, tiny
from zoo.tokenizers.chat import ChatTemplateError, render_chat

# the first message's content picks the hostility; anything else renders as a plain chat. (The bomb's size is
# a variable: Jinja folds constant expressions when it compiles, and 'x' * 10**10 would be built right there.)
HOSTILE = ("{% set c = messages[0]['content'] %}"
           "{% macro down(n) %}{{ down(n + 1) }}{% endmacro %}"
           "{% if c == 'div' %}{{ 1 / 0 }}"
           "{% elif c == 'range' %}{{ range(10**9) | list | length }}"
           "{% elif c == 'import' %}{% import 'x.j2' as x %}"
           "{% elif c == 'recurse' %}{{ down(0) }}"
           "{% elif c == 'bomb' %}{% set big = 10**10 %}{{ ('x' * big) | length }}"
           "{% elif c == 'loop' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
           "{% endfor %}"
           "{% else %}{{ bos_token + c }}{% endif %}")
SMALL = {"model": NAME, "prompt": "the cat", "max_tokens": 2, "temperature": 0}
BUDGET = 2.0  # prepare_timeout of the hostile server (seconds)


def _chat(content: str) -> dict:
    return {"model": NAME, "messages": [{"role": "user", "content": content}], "max_tokens": 2}


@pytest.fixture(scope="module")
def hostile():
    model, tok = tiny()
    tok.chat_template = HOSTILE
    with serving(model, tok, prepare_workers=2, prepare_timeout=BUDGET, max_body_mb=16) as (url, served):
        httpx.post(f"{url}/completions", json=SMALL, timeout=30).raise_for_status()  # workers are up
        yield url


def _error(r: httpx.Response, status: int, param: str | None, code: str | None) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert (error["param"], error["code"]) == (param, code)
    return error["message"]


@pytest.mark.parametrize(("content", "raised"), [
    ("div", "ZeroDivisionError"), ("range", "OverflowError"), ("import", "TypeError"),
    ("recurse", "RecursionError")])  # 'bomb' needs the workers' memory budget: through the server below
def test_render_chat_maps_any_template_error_to_chat_template_error(content, raised):
    """render_chat caught only jinja2's TemplateError: 1/0, range(10**9), {% import %} escaped as 500s."""
    with pytest.raises(ChatTemplateError, match=f"chat template failed: {raised}"):
        render_chat(HOSTILE, [{"role": "user", "content": content}], {"bos": "<s>"})


@pytest.mark.parametrize("content", ["div", "range", "import", "recurse", "bomb"])
def test_a_failing_template_is_a_400_naming_its_error(hostile, content):
    r = httpx.post(f"{hostile}/chat/completions", json=_chat(content), timeout=30)
    message = _error(r, 400, "messages", None)
    assert "chat template failed" in message


@pytest.mark.parametrize(("raw", "param", "says"), [
    (b'{"model": "tiny-zoo", "prompt": "a\\ud800"}', "prompt", "lone surrogate"),
    (b'{"model": "tiny-zoo", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None,
     "nests arrays or objects deeper"),
])
def test_json_the_server_cannot_take_is_a_400_saying_why(server, raw, param, says):
    """Were text/plain 500s with a reset connection (RecursionError, the tokenizer's TypeError)."""
    r = httpx.post(f"{server[0]}/completions", content=raw, headers={"Content-Type": "application/json"})
    assert says in _error(r, 400, param, "invalid_value" if param else None)


def _latency(url: str) -> float:
    start = time.perf_counter()
    httpx.post(f"{url}/completions", json=SMALL, timeout=30).raise_for_status()
    return time.perf_counter() - start


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["template", "prompt"])
def test_others_keep_their_latency_while_one_request_is_stopped_at_its_budget(hostile, kind):
    """While one request renders a template that loops for ever (or tokenizes a 10 MB prompt), another
    client's small requests take about their idle time; the hostile one gets its own 400 at the budget."""
    idle = statistics.median(_latency(hostile) for _ in range(5))
    body = _chat("loop") if kind == "template" else {**SMALL, "prompt": "the cat sat " * 900_000}
    answer: list[httpx.Response] = []
    endpoint = "chat/completions" if kind == "template" else "completions"
    started = time.perf_counter()
    thread = threading.Thread(target=lambda: answer.append(
        httpx.post(f"{hostile}/{endpoint}", json=body, timeout=60)))
    thread.start()
    time.sleep(0.3)  # the hostile request is being prepared
    during = [_latency(hostile) for _ in range(5)]
    overlapped = thread.is_alive()
    thread.join(timeout=60)
    took = time.perf_counter() - started
    print(f"idle {idle * 1e3:.0f} ms, during {[round(d * 1e3) for d in during]} ms, hostile {took:.1f} s")
    assert overlapped, "the hostile request finished before the small ones were measured"
    assert max(during) < 5 * idle + 1.0, (idle, during)
    param = "messages" if kind == "template" else "prompt"
    message = _error(answer[0], 400, param, answer[0].json()["error"]["code"])
    assert answer[0].json()["error"]["code"] in ("prepare_timeout", "prepare_memory"), message
    assert took < BUDGET + 10
    assert httpx.post(f"{hostile}/chat/completions", json=_chat("hi"), timeout=30).status_code == 200


def test_body_past_the_limit_is_413_before_it_is_read():
    model, tok = tiny()
    with serving(model, tok, max_body_mb=0.01) as (url, _):
        big = json.dumps({**SMALL, "prompt": "a" * 20_000}).encode()
        r = httpx.post(f"{url}/completions", content=big, headers={"Content-Type": "application/json"})
        message = _error(r, 413, None, "request_too_large")
        assert "this server accepts at most" in message and "max_body_mb=0.01" in message

        def chunks():  # no Content-Length: the limit is checked while reading
            yield big[:8000]
            yield big[8000:]
        r = httpx.post(f"{url}/completions", content=chunks(), headers={"Content-Type": "application/json"})
        _error(r, 413, None, "request_too_large")
        assert httpx.post(f"{url}/completions", json=SMALL, timeout=30).status_code == 200


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_only_json_content_is_accepted(server, content_type):
    """A web page can make a browser POST text/plain (or no type) without a CORS preflight: refused."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = httpx.post(f"{server[0]}/completions", content=json.dumps(SMALL).encode(), headers=headers)
    assert "Unsupported Content-Type" in _error(r, 415, None, "unsupported_media_type")
    ok = httpx.post(f"{server[0]}/completions", content=json.dumps(SMALL).encode(),
                    headers={"Content-Type": "application/json; charset=utf-8"}, timeout=30)
    assert ok.status_code == 200


def test_api_key_is_required_when_set():
    openai = pytest.importorskip("openai")
    model, tok = tiny()
    with serving(model, tok, api_key="s3cret") as (url, _):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
            for r in (httpx.post(f"{url}/completions", json=SMALL, headers=headers),
                      httpx.get(f"{url}/models", headers=headers)):
                said = "Incorrect API key provided" if headers else "You didn't provide an API key"
                assert said in _error(r, 401, None, "invalid_api_key")
        good = {"Authorization": "Bearer s3cret"}
        assert httpx.post(f"{url}/completions", json=SMALL, headers=good, timeout=30).status_code == 200
        client = openai.OpenAI(base_url=url, api_key="s3cret", max_retries=0, timeout=30)
        assert client.models.list().data[0].id == NAME
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="nope", max_retries=0).models.list()


def test_a_top_p_that_rounds_to_zero_keeps_the_most_likely_token(server):
    """top_p=5e-324 (found by test_fuzz.py) is 0 in float32: top-p dropped every token, sampling met NaN and
    the engine ended every running row with a 500. The most likely token always stays: greedy's tokens."""
    body = {**SMALL, "max_tokens": 4, "temperature": 1.0, "seed": 0}
    greedy = httpx.post(f"{server[0]}/completions", json={**body, "temperature": 0}, timeout=30).json()
    for top_p in (5e-324, 1e-300):
        r = httpx.post(f"{server[0]}/completions", json={**body, "top_p": top_p}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == greedy["choices"][0]["text"]
