"""The real `openai` client against the server: models, completions, chat, streaming; the server's text is
`model.generate`'s for the same greedy request and for a seeded sampling request (choice k <-> seed + k),
alone or among concurrent requests; stop strings; and one `curl` of each endpoint."""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.serving.conftest import NAME, reference


def test_models_lists_the_served_model(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [NAME]
    assert client.models.retrieve(NAME).id == NAME


@pytest.mark.parametrize("prompt", ["the cat", "a dog ran", "why"])
def test_greedy_completion_equals_generate(client, server, prompt):
    _, _, model, tok = server
    ids = tok.encode(prompt)
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=12, temperature=0)
    choice = out.choices[0]
    assert choice.text == reference(model, tok, ids, 12)
    assert out.usage.prompt_tokens == len(ids)
    assert out.usage.completion_tokens == len(tok.encode(choice.text)) + (choice.finish_reason == "stop")
    by_ids = client.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0)
    assert by_ids.choices[0].text == choice.text


def test_seeded_sampling_equals_generate_with_seed_plus_choice(client, server):
    _, _, model, tok = server
    ids = tok.encode("hello")
    out = client.completions.create(model=NAME, prompt="hello", max_tokens=10, temperature=0.9, top_p=0.8,
                                    seed=5, n=3)
    texts = [c.text for c in sorted(out.choices, key=lambda c: c.index)]
    expected = [reference(model, tok, ids, 10, do_sample=True, temperature=0.9, top_p=0.8, seed=5 + k)
                for k in range(3)]
    assert texts == expected
    assert len(set(expected)) > 1  # the choices really are different draws


def test_chat_uses_the_chat_template(client, server):
    _, _, model, tok = server
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    out = client.chat.completions.create(model=NAME, messages=messages, max_tokens=8, temperature=0)
    ids = tok.chat_ids(messages)
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == reference(model, tok, ids, 8)
    assert out.usage.prompt_tokens == len(ids)


def test_streaming_gives_the_same_text_in_chunks(client, server):
    whole = client.completions.create(model=NAME, prompt="the cat", max_tokens=10, temperature=0)
    chunks = list(client.completions.create(model=NAME, prompt="the cat", max_tokens=10, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(pieces) == whole.choices[0].text and len(pieces) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_chat_streaming(client):
    messages = [{"role": "user", "content": "a dog"}]
    whole = client.chat.completions.create(model=NAME, messages=messages, max_tokens=8, temperature=0.7,
                                           seed=1)
    chunks = list(client.chat.completions.create(model=NAME, messages=messages, max_tokens=8,
                                                 temperature=0.7, seed=1, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_concurrent_requests_each_get_their_alone_tokens(client, server):
    _, served, model, tok = server
    prompts = ["the cat", "a dog ran far", "hello", "why? be", "t", "on the mat", "far away", "sat"]
    lengths = [5, 20, 9, 14, 30, 3, 11, 25]  # rows leave at different steps while others run
    steps_before = served.engine.steps

    def ask(i: int) -> str:
        return client.completions.create(model=NAME, prompt=prompts[i], max_tokens=lengths[i],
                                         temperature=0).choices[0].text

    with ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(ask, range(len(prompts))))
    assert got == [reference(model, tok, tok.encode(p), n) for p, n in zip(prompts, lengths, strict=True)]
    assert served.engine.steps - steps_before < sum(lengths)  # rows shared decode steps


def test_stop_string_ends_the_choice_before_it(client, server):
    _, _, model, tok = server
    full = reference(model, tok, tok.encode("the cat"), 12)
    stop = full[3:5]
    cut = full.index(stop)
    for stream in (False, True):
        if stream:
            chunks = list(client.completions.create(model=NAME, prompt="the cat", max_tokens=12,
                                                    temperature=0, stop=[stop], stream=True))
            text = "".join(c.choices[0].text for c in chunks)
            finish = chunks[-1].choices[0].finish_reason
        else:
            choice = client.completions.create(model=NAME, prompt="the cat", max_tokens=12, temperature=0,
                                               stop=stop).choices[0]
            text, finish = choice.text, choice.finish_reason
        assert (text, finish) == (full[:cut], "stop")


def test_curl_streams_and_answers(server):
    curl = shutil.which("curl")
    assert curl is not None, "curl is needed (CI has it): apt-get install curl"
    url, _, model, tok = server
    body = {"model": NAME, "prompt": "the cat", "max_tokens": 6, "temperature": 0}
    post = [curl, "-sS", "-N", "-H", "Content-Type: application/json", "-d"]
    whole = json.loads(subprocess.run([*post, json.dumps(body), f"{url}/completions"], capture_output=True,
                                      text=True, check=True, timeout=60).stdout)
    assert whole["choices"][0]["text"] == reference(model, tok, tok.encode("the cat"), 6)
    events = subprocess.run([*post, json.dumps({**body, "stream": True}), f"{url}/completions"],
                            capture_output=True, text=True, check=True, timeout=60).stdout
    lines = [line for line in events.split("\n\n") if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in lines[:-1])
    assert text == whole["choices"][0]["text"]
    chat = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    reply = json.loads(subprocess.run([*post, json.dumps(chat), f"{url}/chat/completions"],
                                      capture_output=True, text=True, check=True, timeout=60).stdout)
    assert reply["object"] == "chat.completion" and reply["usage"]["completion_tokens"] <= 4
