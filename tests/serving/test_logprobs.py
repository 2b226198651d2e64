"""Log-probabilities, penalties and logit bias through the real `openai` client, against transformers: the
served model is a tiny Llama built in transformers and read with zoo.from_pretrained, and each reference is
worked out on the transformers model itself (log_softmax of its logits at every generated position; a
greedy loop that applies OpenAI's penalty formula by hand)."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.serving.conftest import NAME, TEXTS, serving
from zoo.data import TOKENIZERS

transformers = pytest.importorskip("transformers")
openai = pytest.importorskip("openai", reason="the openai client is in the dev extra")

ABS = 1e-4


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """(base URL, zoo model, tokenizer, transformers model): the same tiny Llama weights served by zoo."""
    tok = TOKENIZERS["char"](TEXTS)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=64, bos_token_id=tok.bos_id,
                                   eos_token_id=tok.eos_id, pad_token_id=tok.padding_id)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # logits spread over about 2 (not 0.4), so top tokens are clearly ordered
        hf.lm_head.weight.mul_(5)
    folder = tmp_path_factory.mktemp("llama")
    hf.save_pretrained(folder)
    model = zoo.from_pretrained(folder).eval()
    with serving(model, tok) as (url, _served):
        yield url, model, tok, hf


@pytest.fixture(scope="module")
def client(llama):
    return openai.OpenAI(base_url=llama[0], api_key="unused", max_retries=0, timeout=60)


def hf_logprobs(hf, prompt: list[int], new: list[int]) -> torch.Tensor:
    """(len(new), V): transformers' log_softmax over the vocabulary before each new token."""
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + new])).logits[0].float()  # (T, V)
    return torch.log_softmax(logits, -1)[len(prompt) - 1 : len(prompt) - 1 + len(new)]


def text_of(tok, token: int) -> str:
    return tok.decode([token], skip_special_tokens=False)


def ids_of(tok, texts: list[str]) -> list[int]:
    """The ids of served token texts (each id of the character vocabulary has its own text)."""
    table = {text_of(tok, i): i for i in range(tok.vocab_size)}
    assert len(table) == tok.vocab_size
    return [table[t] for t in texts]


def check_entries(tok, logp: torch.Tensor, new: list[int], tokens, token_logprobs, tops, k: int) -> None:
    """The served tokens / log-probabilities / top-k against transformers' (len(new), V) log_softmax."""
    assert tokens == [text_of(tok, t) for t in new]
    want = [float(logp[i, t]) for i, t in enumerate(new)]
    assert token_logprobs == pytest.approx(want, abs=ABS)
    for i, top in enumerate(tops):
        values, ids = logp[i].topk(k)
        assert [t for t, _ in top] == [text_of(tok, int(t)) for t in ids]
        assert [lp for _, lp in top] == pytest.approx(values.tolist(), abs=ABS)


@pytest.mark.parametrize("sampling", [dict(temperature=0), dict(temperature=1.7, top_p=0.5, seed=3)],
                         ids=["greedy", "sampled"])
def test_completion_logprobs_are_transformers_raw_log_softmax(client, llama, sampling):
    """logprobs=3: each token's log-probability and the 3 most likely, from the raw distribution (not the
    temperature / top-p one the sampled request draws from), with each token's offset in the text."""
    _, _, tok, hf = llama
    prompt = tok.encode("the cat")
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=8, logprobs=3, **sampling)
    choice = out.choices[0]
    lp = choice.logprobs
    ids = ids_of(tok, lp.tokens)
    check_entries(tok, hf_logprobs(hf, prompt, ids), ids, lp.tokens, lp.token_logprobs,
                  [list(d.items()) for d in lp.top_logprobs], 3)
    assert lp.text_offset == [len(tok.decode(ids[:i])) for i in range(len(ids))]  # special tokens: no text
    assert choice.text == tok.decode(ids)


def test_chat_logprobs_whole_and_streamed(client, llama):
    _, _, tok, hf = llama
    messages = [{"role": "user", "content": "hello"}]
    prompt = tok.chat_ids(messages)
    whole = client.chat.completions.create(model=NAME, messages=messages, max_tokens=6, temperature=0,
                                           logprobs=True, top_logprobs=2)
    content = whole.choices[0].logprobs.content
    new = ids_of(tok, [c.token for c in content])
    check_entries(tok, hf_logprobs(hf, prompt, new), new, [c.token for c in content],
                  [c.logprob for c in content], [[(t.token, t.logprob) for t in c.top_logprobs]
                                                 for c in content], 2)
    assert all(c.bytes == list(c.token.encode()) for c in content)
    chunks = client.chat.completions.create(model=NAME, messages=messages, max_tokens=6, temperature=0,
                                            logprobs=True, top_logprobs=2, stream=True)
    streamed = [entry for chunk in chunks if chunk.choices and chunk.choices[0].logprobs
                for entry in chunk.choices[0].logprobs.content]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]
    plain = client.chat.completions.create(model=NAME, messages=messages, max_tokens=6, temperature=0)
    assert plain.choices[0].logprobs is None


def test_streamed_completion_logprobs_add_up_to_the_whole(client, llama):
    kwargs = dict(model=NAME, prompt="a dog", max_tokens=7, temperature=0, logprobs=2)
    whole = client.completions.create(**kwargs).choices[0].logprobs
    parts = [c.choices[0].logprobs for c in client.completions.create(**kwargs, stream=True)
             if c.choices and c.choices[0].logprobs]
    assert sum((p.tokens for p in parts), []) == whole.tokens
    assert sum((p.token_logprobs for p in parts), []) == whole.token_logprobs
    assert sum((p.text_offset for p in parts), []) == whole.text_offset


def greedy_by_hand(hf, prompt: list[int], steps: int, *, frequency: float = 0.0, presence: float = 0.0,
                   bias: dict[int, float] | None = None) -> list[int]:
    """OpenAI's formula on transformers' logits: logits[j] - c[j] * frequency - (c[j] > 0) * presence +
    bias[j], c[j] = how often j was generated so far; argmax; no cache, one full forward a token."""
    new: list[int] = []
    for _ in range(steps):
        with torch.no_grad():
            logits = hf(torch.tensor([prompt + new])).logits[0, -1].float()
        counts = torch.bincount(torch.tensor(new, dtype=torch.long), minlength=logits.shape[0]).float()
        logits = logits - counts * frequency - (counts > 0).float() * presence
        for t, b in (bias or {}).items():
            logits[t] += b
        new.append(int(logits.argmax()))
    return new


# the tiny model does not repeat itself within 10 tokens, so a logit bias on its first token ("5") makes it
# repeat that token, which the penalties then break, each after its own number of repeats
@pytest.mark.parametrize("options", [
    dict(frequency_penalty=1.5, logit_bias={"5": 3}), dict(presence_penalty=2.0, logit_bias={"5": 2}),
    dict(frequency_penalty=0.8, presence_penalty=-0.5, logit_bias={"5": 3}), dict(logit_bias={"5": 100}),
    dict(logit_bias={"7": 3.5, "9": -100}, frequency_penalty=0.7),
], ids=["frequency", "presence", "both", "bias-forces", "bias-and-frequency"])
def test_penalties_and_bias_follow_openais_formula(client, llama, options):
    _, _, tok, hf = llama
    prompt = tok.encode("the cat")
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=10, temperature=0, logprobs=1,
                                    **options)
    bias = {int(k): v for k, v in options.get("logit_bias", {}).items()}
    want = greedy_by_hand(hf, prompt, 10, frequency=options.get("frequency_penalty", 0.0),
                          presence=options.get("presence_penalty", 0.0), bias=bias)
    if tok.eos_id in want:
        want = want[: want.index(tok.eos_id)]
    assert out.choices[0].logprobs.tokens == [text_of(tok, t) for t in want]
    penalised = "frequency_penalty" in options or "presence_penalty" in options
    assert want != greedy_by_hand(hf, prompt, 10, bias=bias if penalised else None)  # the options matter
    # log-probabilities stay the model's raw ones, before the penalties
    got = out.choices[0].logprobs.token_logprobs
    assert got == pytest.approx([float(x) for x in hf_logprobs(hf, prompt, want).gather(
        1, torch.tensor(want)[:, None])[:, 0]], abs=ABS)


def test_echo_scores_the_prompt_as_transformers_does(client, llama):
    """echo=true, max_tokens=0, logprobs=1 (how lm-eval's local-completions model scores text): the prompt
    comes back with each token's log-probability given the tokens before it (the first has none)."""
    _, _, tok, hf = llama
    prompt = tok.encode("the cat sat")
    out = client.completions.create(model=NAME, prompt="the cat sat", max_tokens=0, echo=True, logprobs=1,
                                    temperature=0)
    choice, lp = out.choices[0], out.choices[0].logprobs
    assert choice.text == "the cat sat" and out.usage.completion_tokens == 0
    assert lp.tokens == [text_of(tok, t) for t in prompt]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    logp = hf_logprobs(hf, prompt[:1], prompt[1:])
    check_entries(tok, logp, prompt[1:], lp.tokens[1:], lp.token_logprobs[1:],
                  [list(d.items()) for d in lp.top_logprobs[1:]], 1)
    assert lp.text_offset == list(range(len(prompt)))


def test_echo_puts_the_prompt_before_the_completion_whole_and_streamed(client, llama):
    _, _, tok, hf = llama
    plain = client.completions.create(model=NAME, prompt="a dog", max_tokens=5, temperature=0, logprobs=1)
    kwargs = dict(model=NAME, prompt="a dog", max_tokens=5, temperature=0, echo=True)
    whole = client.completions.create(**kwargs, logprobs=1).choices[0]
    assert whole.text == "a dog" + plain.choices[0].text
    lp = whole.logprobs
    assert lp.tokens == [text_of(tok, t) for t in tok.encode("a dog")] + plain.choices[0].logprobs.tokens
    assert lp.token_logprobs[5:] == plain.choices[0].logprobs.token_logprobs
    assert lp.text_offset[5:] == [5 + o for o in plain.choices[0].logprobs.text_offset]
    chunks = [c.choices[0] for c in client.completions.create(**kwargs, logprobs=1, stream=True) if c.choices]
    assert "".join(c.text for c in chunks) == whole.text
    assert sum((c.logprobs.tokens for c in chunks if c.logprobs), []) == lp.tokens
    no_logprobs = client.completions.create(**kwargs).choices[0]
    assert no_logprobs.text == whole.text and no_logprobs.logprobs is None
    streamed = "".join(c.choices[0].text for c in client.completions.create(**kwargs, stream=True)
                       if c.choices)
    assert streamed == whole.text
    empty = client.completions.create(model=NAME, prompt="a dog", max_tokens=0, echo=True, stream=True)
    assert "".join(c.choices[0].text for c in empty if c.choices) == "a dog"
