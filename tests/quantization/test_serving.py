"""serve.py on a quantised model: the server batches requests of different lengths through the int4 kernel
(several rows per call, left padding) and each greedy completion equals the quantised model's own
`generate` for that prompt alone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import zoo
from tests.serving.conftest import NAME, reference, serving, tiny

PROMPTS = ["the cat", "a dog ran far", "why"]


def test_served_int4_model_completes_as_the_library():
    openai = pytest.importorskip("openai", reason="the openai client is in the dev extra")
    model, tok = tiny()
    # the character vocabulary (out_features of the head) is no multiple of 16: the head stays float
    quantized = zoo.quantize(model, "int4", group_size=32, head=False)
    with serving(quantized, tok) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)

        def complete(prompt: str) -> str:
            return client.completions.create(model=NAME, prompt=prompt, max_tokens=10,
                                             temperature=0).choices[0].text

        with ThreadPoolExecutor(len(PROMPTS)) as pool:  # together: the engine decodes them as one batch
            texts = list(pool.map(complete, PROMPTS))
    assert texts == [reference(quantized, tok, tok.encode(p), 10) for p in PROMPTS]
