"""GGUF both ways (zoo/pretrained/gguf_file.py, gguf_arch.py; zoo/tokenizers/gguf_vocab.py): for each family
GGUF export supports, transformers' own GGUF reader (`from_pretrained(folder, gguf_file=...)`) loads zoo's
file as a model with zoo's logits, zoo reads the file back, and transformers' tokenizer from the file gives
the ids of the tokenizer zoo wrote, on multilingual text. Models are tiny transformers configs of the family,
every weight perturbed; tokenizers are trained here; nothing is downloaded.

Tolerances against the float32 zoo model: f32 1e-4 (the same numbers; only summation order differs). f16
keeps an 11-bit significand, so each weight moves by at most 2^-11 of itself: max |logit error| measured
4e-4 to 1.8e-3 on these models (logits up to ~1.3; Gemma 3 the largest), bound 5e-3. q8_0 stores each
block of 32 weights as int8 times the block's max / 127, so a weight moves by up to 0.4% of its block's
largest: measured 1.5e-2 to 3.4e-2, bound 0.1. q4_0 (16
levels per block) is not compared with float32; for every dtype, transformers' logits equal those of zoo's
own read-back of the same file within 1e-4, which pins the layout (names, q/k permutation, block order)."""

from __future__ import annotations

import json
from functools import cache

import pytest
import torch
from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

import zoo
from tests.pretrained.helpers import perturbed
from tests.pretrained.shipped import DECODERS
from zoo.pretrained.gguf_arch import ARCHS
from zoo.pretrained.gguf_file import (
    GGUF_FILE,
    plan_gguf,
    read_gguf_tokenizer,
    without_idle_window,
    write_gguf,
)
from zoo.pretrained.roundtrip import effective
from zoo.tokenizers.gguf_vocab import LLAMA3_SPLIT, QWEN2_SPLIT
from zoo.tokenizers.tokenizer import SPECIAL_TOKENS, ZooTokenizer, model_overrides
from zoo.tokenizers.trained import train_bpe

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

TEXTS = [
    "The quick brown fox jumps over the lazy dog. It's 2024; we've seen 1234567 foxes!\n\n",
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Äpfel, Öl.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "素早い茶色の狐が怠惰な犬を飛び越える。東京は大きい。",
    "快速的棕色狐狸跳过了懒狗。", "السريع البني الثعلب يقفز فوق الكلب الكسول",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।", "Emoji 🎉🦊 and   spaces\t tabs\r\n ok",
]
SAMPLES = ["Hello wörld! It's 12345 foxes  \n\n  ok", "Лиса и собака: 日本語のテキスト, 中文。",
           "कुत्ते 🎉 السلام  trailing   ", "'ll 've 're  CAPS lower MiXeD 3.14159"]
TOLERANCE = {"f32": 1e-4, "f16": 5e-3, "q8_0": 0.1}  # vs the float32 zoo model (see the docstring)
FAMILY_TOKENIZER = {"llama": "llama-bpe", "mistral": "gpt-2", "qwen2": "qwen2", "qwen3": "qwen2",
                    "phi3": "gpt-2", "gpt2": "gpt-2", "gemma2": "gpt-2", "gemma3_text": "gpt-2"}
# transformers' GGUF reader leaves Qwen3's head_dim and GPT-2's n_positions at their defaults (128, 1024;
# it reads gpt2.context_length as n_ctx): the tiny models use those
SHAPES = {"qwen3": dict(num_attention_heads=2, num_key_value_heads=1, head_dim=128),
          "gpt2": dict(n_positions=1024),
          # llama.cpp scales Gemma's scores by 1/sqrt(head_dim), transformers by query_pre_attn_scalar (256)
          "gemma2": dict(num_attention_heads=2, num_key_value_heads=1, head_dim=256),
          "gemma3_text": dict(num_attention_heads=2, num_key_value_heads=1, head_dim=256)}


def split_bpe(regex: str, ignore_merges: bool) -> ZooTokenizer:
    """A BPE tokenizer.json shaped as Llama 3's / Qwen2's: a Split on `regex`, then ByteLevel bytes."""
    hf = HFTokenizer(models.BPE(ignore_merges=ignore_merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, min_frequency=1, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    hf.train_from_iterator(TEXTS, trainer=trainer)
    return ZooTokenizer(hf, kind="bpe")


@cache
def tokenizer(pre: str) -> ZooTokenizer:
    """A tokenizer whose split is llama.cpp's pre-tokenizer `pre`: zoo's own BPE is GPT-2's."""
    if pre == "gpt-2":
        return train_bpe(TEXTS, vocab_size=400, min_frequency=1)
    return split_bpe(LLAMA3_SPLIT, True) if pre == "llama-bpe" else split_bpe(QWEN2_SPLIT, False)


@cache
def zoo_model(family: str, vocab_size: int, tmp) -> torch.nn.Module:
    """zoo's read of a tiny perturbed transformers model of `family` (so it remembers its family)."""
    config_class, tiny, _ = DECODERS[family]
    config = getattr(transformers, config_class)(**{**tiny, "vocab_size": vocab_size, "intermediate_size": 64,
                                                   **SHAPES.get(family, {})})
    hf = perturbed(transformers.AutoModelForCausalLM.from_config(config))
    hf.save_pretrained(tmp / family)
    return zoo.from_pretrained(tmp / family)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hf")


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0", "q4_0"])
@pytest.mark.parametrize("family", list(FAMILY_TOKENIZER))
def test_transformers_reads_zoo_gguf_with_zoo_logits(family, dtype, models_dir, tmp_path):
    tok = tokenizer(FAMILY_TOKENIZER[family])
    model = zoo_model(family, tok.vocab_size, models_dir)
    write_gguf(plan_gguf(model, tok, dtype), tmp_path / GGUF_FILE)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=GGUF_FILE).eval()
    again = zoo.from_pretrained(tmp_path / GGUF_FILE)
    ids = torch.randint(5, tok.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        mine, back, hf = model(ids).logits, again(ids).logits, theirs(ids).logits
    assert (hf - back).abs().max() < 1e-4  # the same file, read by both: same layout
    if dtype in TOLERANCE:
        assert (hf - mine).abs().max() <= TOLERANCE[dtype]
    if dtype == "f32":  # zoo reads back the model it wrote, bit for bit (Gemma's gains: to an ulp of 1)
        same = without_idle_window(model.config, ARCHS[family])
        assert effective(again.config) == effective(same)  # dropouts aside
        ulp = 2.0 ** -23 if family.startswith("gemma") else 0.0  # Gemma's gains go through 1 + w in float32
        for name, tensor in model.state_dict().items():
            torch.testing.assert_close(again.state_dict()[name], tensor, rtol=0, atol=ulp, msg=name)


@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2"])
def test_transformers_tokenizer_from_gguf_gives_zoo_ids(pre, models_dir, tmp_path):
    tok = tokenizer(pre)
    write_gguf(plan_gguf(zoo_model("llama", tok.vocab_size, models_dir), tok, "f32"), tmp_path / GGUF_FILE)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=GGUF_FILE)
    for text in SAMPLES + TEXTS:
        assert theirs(text, add_special_tokens=False)["input_ids"] == tok.encode(text), text
        assert theirs.decode(tok.encode(text)) == text
    assert (theirs.bos_token, theirs.eos_token, theirs.pad_token) == ("<bos>", "<eos>", "<pad>")
    assert theirs.chat_template == tok.chat_template
    back = read_gguf_tokenizer(tmp_path / GGUF_FILE)  # zoo reads its own file's tokenizer back
    assert [back.encode(t) for t in SAMPLES + TEXTS] == [tok.encode(t) for t in SAMPLES + TEXTS]
    assert (back.specials, back.chat_template, back.vocab_size) == (tok.specials, tok.chat_template,
                                                                    tok.vocab_size)


def test_a_gguf_of_an_architecture_zoo_does_not_read_is_named(tmp_path):
    import gguf

    writer = gguf.GGUFWriter(str(tmp_path / "other.gguf"), "mamba")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 8).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=r"other.gguf: zoo reads GGUF architectures llama, qwen2, qwen3, "
                                         r"phi3, gpt2, gemma2, gemma3, not 'mamba'"):
        zoo.from_pretrained(tmp_path / "other.gguf")


def test_a_gguf_without_the_keys_of_its_architecture_is_named(tmp_path):
    import gguf

    writer = gguf.GGUFWriter(str(tmp_path / "bare.gguf"), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 8).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=r"bare.gguf: its llama metadata does not describe a model zoo "
                                         r"builds: it has no llama.vocab_size"):
        zoo.from_pretrained(tmp_path / "bare.gguf")


def llama3_folder(folder):
    """A Hugging Face tokenizer folder shaped as Llama 3's: its own specials after the vocabulary, BOS added
    by the post-processor, a non-special added token, a chat template."""
    from tokenizers import processors

    hf = split_bpe(LLAMA3_SPLIT, True).hf
    hf.add_special_tokens(["<|begin_of_text|>", "<|eot_id|>"])
    hf.add_tokens(["<think>"])
    bos = hf.token_to_id("<|begin_of_text|>")
    hf.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                      special_tokens=[("<|begin_of_text|>", bos)])
    folder.mkdir()
    hf.save(str(folder / "tokenizer.json"))
    template = ("{{ bos_token }}{% for m in messages %}<|start|>{{ m['role'] }}\n{{ m['content'] }}<|eot_id|>"
                "{% endfor %}")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": template}))
    return folder


def test_a_hugging_face_tokenizer_keeps_its_own_specials_bos_and_template(tmp_path):
    from zoo.tokenizers.hf import load_hf_tokenizer

    tok = load_hf_tokenizer(llama3_folder(tmp_path / "tok"))
    model = zoo.build("llama_small", d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=16,
                      **model_overrides(tok))  # its ids the tokenizer's, as train.py sets them
    write_gguf(plan_gguf(model, tok, "f32"), tmp_path / GGUF_FILE)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=GGUF_FILE)
    back = read_gguf_tokenizer(tmp_path / GGUF_FILE)
    for text in [*SAMPLES, "a <think> b"]:
        assert theirs(text, add_special_tokens=False)["input_ids"] == tok.encode(text) == back.encode(text)
        assert theirs(text)["input_ids"] == [tok.bos_id, *tok.encode(text)]  # BOS added, as the folder does
    assert (theirs.bos_token, theirs.eos_token) == ("<|begin_of_text|>", "<|eot_id|>")
    assert theirs.chat_template == tok.chat_template == back.chat_template
    assert (back.bos_id, back.eos_id, back.pad_id) == (tok.bos_id, tok.eos_id, tok.pad_id)
