"""init_from=<model.gguf> (zoo.finetune.init_from.GGUFFile): the file's model, weights and tokenizer start a
run as a Hugging Face folder's would. The file is zoo's own GGUF export of a tiny Llama-shaped model with a
zoo BPE; nothing is downloaded."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.finetune.init_from import GGUFFile, open_source
from zoo.pretrained.gguf_file import GGUF_FILE, plan_gguf, write_gguf
from zoo.pretrained.roundtrip import effective
from zoo.tokenizers.trained import train_bpe
from zoo.training.run import train

from .conftest import FAST
from .folders import CORPUS

pytest.importorskip("gguf")
TEXT = "def add(a, b):\n    return a + b  # Größe, 日本語\n"


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    """(path, model, tokenizer): a zoo BPE model written as f32 GGUF."""
    tokenizer = train_bpe(CORPUS, vocab_size=300, min_frequency=1)
    model = zoo.build("llama_small", vocab_size=tokenizer.vocab_size, d_model=32, n_layers=1, n_heads=2,
                      n_kv_heads=1, d_ff=64, max_seq_len=64).eval()
    path = tmp_path_factory.mktemp("gguf") / "model.q"  # known by its magic bytes, not its name
    write_gguf(plan_gguf(model, tokenizer, "f32"), path)
    return path, model, tokenizer


def test_a_gguf_file_is_a_source_with_the_model_weights_and_tokenizer_it_holds(gguf_file):
    path, model, tokenizer = gguf_file
    source = open_source(str(path))
    assert isinstance(source, GGUFFile) and source.has_tokenizer()
    assert effective(source.config()) == effective(model.config)  # dropouts aside: the same model
    state = source.state()
    assert source.model_type == "llama"
    for name, tensor in model.state_dict().items():
        assert torch.equal(state[name], tensor), name
    assert source.shipped_tokenizer.encode(TEXT) == tokenizer.encode(TEXT)
    assert source.tokenizer_size() == tokenizer.vocab_size


@pytest.mark.e2e
def test_training_starts_from_a_gguf_file_and_exports_one_transformers_reads(make_run_cfg, gguf_file, folders,
                                                                             tmp_path):
    """GGUF -> train.py init_from -> export.py format=gguf -> transformers: the trained model's logits and
    its tokenizer's ids."""
    transformers = pytest.importorskip("transformers")
    path, model, tokenizer = gguf_file
    result = train(make_run_cfg([f"init_from={path}", "data=text", f"data.files={folders['corpus']}", *FAST,
                                 "trainer.max_steps=3", "eval_every=3"]))
    trained, tok = zoo.load(result.last_checkpoint)
    assert tok.encode(TEXT) == tokenizer.encode(TEXT)
    assert trained.config.vocab_size == model.config.vocab_size and trained.pretrained_family == "llama"
    out = zoo.export(result.last_checkpoint, tmp_path / "gguf", format="gguf", dtype="f32")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out, gguf_file=GGUF_FILE).eval()
    ids = torch.tensor([tok.encode(TEXT)])
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).logits, trained.eval()(ids).logits, atol=1e-4, rtol=0)
    their_tok = transformers.AutoTokenizer.from_pretrained(out, gguf_file=GGUF_FILE)
    assert their_tok(TEXT, add_special_tokens=False)["input_ids"] == tok.encode(TEXT)
