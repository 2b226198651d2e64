"""Each endpoint is one registry entry (zoo.serving.endpoint.ENDPOINTS) that answers for itself: every entry
is routed and documented from its own field table and names its own prompt field; and a made-up endpoint,
one class registered and nothing else changed, is prepared in a worker process, served, streamed and
refused as it says, next to the real ones."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

import zoo.serving.app  # noqa: F401  (registers the endpoints)
from tests.serving.conftest import NAME, reference, serving, tiny
from tests.serving.made_up_endpoint import Reverse
from zoo.serving.endpoint import ENDPOINTS, Limits
from zoo.serving.prepare import prepare
from zoo.serving.protocol import APIError
from zoo.serving.schema import request_body


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_every_endpoint_is_routed_and_documented_from_its_own_fields(server, name):
    endpoint = ENDPOINTS[name]
    url = server[0].removesuffix("/v1")
    operation = httpx.get(f"{url}/openapi.json", timeout=30).json()["paths"][endpoint.path]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == set(endpoint.fields)
    assert body["required"] == [n for n, f in endpoint.fields.items() if f.required]
    assert endpoint.fields[endpoint.prompt_param].required
    r = httpx.post(url + endpoint.path, json={"model": NAME}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == endpoint.prompt_param


def test_a_made_up_endpoint_is_prepared_by_its_own_rules():
    model, tok = tiny()
    limits = Limits(NAME, tok.vocab_size, 16)
    done = prepare(json.dumps({"model": NAME, "text": "the cat"}).encode(), Reverse(), tok, limits)
    assert (done.prompts, done.max_tokens) == ([tok.encode("tac eht")], 3)
    long = json.dumps({"model": NAME, "text": "the cat sat on the mat"}).encode()
    with pytest.raises(APIError) as caught:  # the shared length check names this endpoint's field
        prepare(long, Reverse(), tok, limits)
    assert (caught.value.param, caught.value.code) == ("text", "context_length_exceeded")
    with pytest.raises(APIError) as caught:
        prepare(json.dumps({"model": NAME, "prompt": "x"}).encode(), Reverse(), tok, limits)
    assert caught.value.message == "Unrecognized request argument supplied: prompt"
    assert request_body(Reverse(), NAME)["requestBody"]["content"]["application/json"]["schema"][
        "required"] == ["model", "text"]


def test_a_made_up_endpoint_is_served_and_streamed_as_it_renders(monkeypatch):
    monkeypatch.setitem(ENDPOINTS._items, "reverse", Reverse())  # registered for this test only
    model, tok = tiny()
    with serving(model, tok) as (url, _), httpx.Client(base_url=url.removesuffix("/v1"), timeout=60) as http:
        body = {"model": NAME, "text": "the cat", "temperature": 0}
        whole = http.post("/v1/reverse", json=body).json()
        expected = reference(model, tok, tok.encode("tac eht"), 3)
        assert whole["id"].startswith("rev-") and whole["object"] == "reverse"
        assert whole["choices"] == [{"index": 0, "reversed": expected, "finish_reason": "length",
                                     "chunk": False}]
        with http.stream("POST", "/v1/reverse", json={**body, "stream": True}) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        assert {e["object"] for e in events} == {"reverse.chunk"}
        assert events[0]["choices"] == [{"index": 0, "hello": True}]
        assert "".join(e["choices"][0]["reversed"] for e in events[1:]) == expected
        assert http.post("/v1/reverse", json={**body, "messages": []}).json()["error"]["param"] == "messages"
        chat = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert http.post("/v1/chat/completions", json=chat).json()["object"] == "chat.completion"


def test_the_preparing_processes_import_no_torch():
    """A worker process imports the endpoints (it prepares their requests) but not torch: its start stays
    cheap and its memory budget (prepare_memory_mb) is spent on requests."""
    code = ("import sys, zoo.serving.workers, zoo.serving.chat, zoo.serving.completion; "
            "print(sorted(m for m in ('torch', 'zoo.generation.continuous.engine') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
