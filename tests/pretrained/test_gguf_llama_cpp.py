"""llama.cpp itself runs zoo's GGUF files (issue 40: "where llama-cpp-python is installed, a test runs the
file and compares greedy tokens"): for each family GGUF export writes, llama.cpp (llama-cpp-python, the
optional `llama_cpp` extra, compiled from source) loads zoo's file, tokenizes multilingual text into zoo's
ids, computes zoo's logits and decodes zoo's greedy tokens. The models and tokenizers are test_gguf's (tiny
perturbed transformers models of the family, tokenizers trained here).

Tolerances against the float32 zoo model (largest differences measured on these models, logits up to ~1.3):
f32 1e-5 (3.5e-7 to 6.6e-7, the K/V cache kept in f32); the GELU families (gpt2, gemma2, gemma3) 1e-3 in f32
(2.9e-4 to 3.6e-4: ggml computes GELU through a float16 table); q8_0 0.1 (1.7e-2 to 4.2e-2), test_gguf's
bound for transformers' read (llama.cpp also quantises the activations to q8 blocks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.pretrained.test_gguf import FAMILY_TOKENIZER, SAMPLES, TEXTS, tokenizer, zoo_model
from zoo.pretrained.gguf_file import GGUF_FILE, plan_gguf, write_gguf

llama_cpp = pytest.importorskip("llama_cpp")  # optional extra: pip install -e ".[llama_cpp]" (a long compile)

TOLERANCE = {"f32": 1e-5, "q8_0": 0.1}
GELU_F32 = 1e-3  # llama.cpp computes GELU through a float16 lookup table (ggml's GGML_GELU_FP16)
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hf")


def run_in_llama_cpp(path, **kwargs):
    """The file in llama.cpp, its K/V cache in float32 (llama.cpp's default is f16, which would round every
    key and value)."""
    return llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=1, n_batch=64, verbose=False,
                           type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, **kwargs)


def greedy(llm, ids: list[int], new: int) -> list[int]:
    """llama.cpp's greedy continuation: evaluate, take the last row's argmax, feed it back."""
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(new):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(token)
        llm.eval([token])
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("dtype", ["f32", "q8_0"])
@pytest.mark.parametrize("family", list(FAMILY_TOKENIZER))
def test_llama_cpp_runs_zoo_gguf_with_zoo_logits_and_greedy_tokens(family, dtype, models_dir, tmp_path):
    tok = tokenizer(FAMILY_TOKENIZER[family])
    model = zoo_model(family, tok.vocab_size, models_dir)
    write_gguf(plan_gguf(model, tok, dtype), tmp_path / GGUF_FILE)
    llm = run_in_llama_cpp(tmp_path / GGUF_FILE, logits_all=True)
    ids = torch.randint(5, tok.vocab_size, (12,), generator=torch.Generator().manual_seed(0)).tolist()
    llm.eval(ids)
    theirs = torch.from_numpy(np.array(llm.scores[: len(ids)]))
    with torch.no_grad():
        mine = model(torch.tensor([ids])).logits[0]
    gelu = "gelu" in model.config.activation or "geglu" in model.config.activation
    assert (theirs - mine).abs().max() <= (GELU_F32 if gelu and dtype == "f32" else TOLERANCE[dtype])
    if dtype == "f32":  # greedy from the same prompt: the same tokens (q8_0 may flip a near tie)
        expected = model.generate([ids], max_new_tokens=NEW_TOKENS, eos_token_id=[])[0, len(ids):].tolist()
        assert greedy(llm, ids, NEW_TOKENS) == expected


@pytest.mark.e2e
@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2"])
def test_llama_cpp_tokenizes_as_zoo(pre, models_dir, tmp_path):
    tok = tokenizer(pre)
    write_gguf(plan_gguf(zoo_model("llama", tok.vocab_size, models_dir), tok, "f32"), tmp_path / GGUF_FILE)
    llm = run_in_llama_cpp(tmp_path / GGUF_FILE, vocab_only=True)
    for text in SAMPLES + TEXTS:
        assert llm.tokenize(text.encode(), add_bos=False, special=False) == tok.encode(text), text
        assert llm.detokenize(tok.encode(text)).decode() == text
