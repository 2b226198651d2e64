"""lm-eval's own OpenAI-API model (`local-completions`, written by lm-eval, not here) scoring through zoo's
server: it asks `/v1/completions` for `echo: true, logprobs: 1, max_tokens: 1` on token ids and reads the
prompt's log-probabilities back, so its log-likelihoods and greedy flags must equal lm-eval's `hf` model on
the same weights (the export folder, whose tokenizer both lm-eval models read)."""

from __future__ import annotations

import json

import pytest
from lm_eval.api.instance import Instance

from tests.serving.conftest import NAME, serving

from .conftest import TASKS

pytestmark = pytest.mark.e2e  # transformers, accelerate and a server (~15 s)
pytest.importorskip("tenacity", reason="lm-eval's API models need lm_eval[api] (in the dev extra)")
pytest.importorskip("fastapi", reason="the serve extra is in dev")


def test_local_completions_through_the_server_equal_the_hf_model(trained, pretrained):
    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    model, tokenizer = trained
    hf = HFLM(pretrained=str(pretrained.hf), batch_size=3, device="cpu", dtype="float32")
    docs = [json.loads(line) for line in (TASKS / "choices.jsonl").read_text().splitlines()]
    requests = [Instance("loglikelihood", {}, (f"Question: {d['question']}\nAnswer:", f" {c}"), 0)
                for d in docs for c in d["choices"]]
    requests.append(Instance("loglikelihood", {}, ("", "What colour is the sky?"), 0))  # the prefix token
    # the server's context is 32 tokens: the API model sends up to max_length and asks for 1 more
    fits = [r for r in requests if len(hf.tok_encode(r.args[0] + r.args[1])) < 31]
    assert len(fits) > 10
    want = hf.loglikelihood(fits, disable_tqdm=True)
    with serving(model, tokenizer) as (url, _served):
        api = LocalCompletionsAPI(model=NAME, base_url=f"{url}/completions", tokenizer_backend="huggingface",
                                  tokenizer=str(pretrained.hf), tokenized_requests=True, max_length=31,
                                  num_concurrent=1, max_retries=1, batch_size=4)
        got = api.loglikelihood(fits, disable_tqdm=True)
    assert [g for g, _ in got] == pytest.approx([w for w, _ in want], abs=1e-4)
    assert [g for _, g in got] == [w for _, w in want]
    assert len({greedy for _, greedy in want}) == 2  # both greedy answers occur
