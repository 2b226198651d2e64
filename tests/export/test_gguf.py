"""Export format gguf refuses, in one error naming the knob, the model or tokenizer llama.cpp cannot carry,
before anything is written: the export folder never appears and no staging is left. The formats' shared
behaviour (re-export, foreign folders) is tests/export/test_formats.py; the conversion itself is checked
against transformers in tests/pretrained/test_gguf.py."""

from __future__ import annotations

import pytest
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

import zoo
from zoo.checkpoint import atomic_torch_save, zoo_section
from zoo.pretrained.gguf_file import GGUF_FILE, plan_gguf
from zoo.tokenizers.tokenizer import SPECIAL_TOKENS, ZooTokenizer
from zoo.tokenizers.trained import train_bpe

pytest.importorskip("gguf")
TEXT = ["hello export, every format: Größe 日本語 1234"]
TINY = dict(d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=16)


def checkpoint(path, tokenizer=None, **knobs):
    """A zoo training checkpoint of a tiny llama_small with `knobs` and a byte-level BPE."""
    tokenizer = tokenizer or train_bpe(TEXT, vocab_size=270, min_frequency=1)
    model = zoo.build("llama_small", vocab_size=tokenizer.vocab_size, **TINY, **knobs)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    atomic_torch_save({"state_dict": state, "zoo": zoo_section(model.config, "lm", tokenizer)}, path)
    return path


@pytest.mark.parametrize(("knobs", "named"), [
    (dict(mixer={"sinks": True}), "model.mixer.sinks=True (would load as False)"),
    (dict(mixer={"softcap": 30.0}), "model.mixer.softcap=30.0 (would load as None)"),
    (dict(mixer={"qk_norm": True, "qk_norm_scope": "all"}), "model.mixer.qk_norm_scope='all'"),
    (dict(positional={"scaling": {"name": "linear", "factor": 2.0}}), "model.positional.scaling='linear'"),
    (dict(positional={"layout": "interleaved"}), "model.positional.layout='interleaved'"),
    (dict(mixer={"sliding_window": 8}), "model.mixer.sliding_window=8 (would load as None)"),
    (dict(head={"name": "classifier", "num_labels": 2}), "this model has model.head='classifier'"),
], ids=["sinks", "softcap", "qk-norm-all", "rope-scaling", "interleaved-rope", "window", "classifier"])
def test_a_knob_llama_cpp_has_no_key_for_is_named_before_anything_is_written(tmp_path, knobs, named):
    ckpt = checkpoint(tmp_path / "model.ckpt", **knobs)
    with pytest.raises(ValueError) as err:
        zoo.export(ckpt, tmp_path / "out", format="gguf")
    assert named in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ckpt"]  # nothing written, no staging left


def test_a_family_chosen_by_name_is_held_to_its_keys(tmp_path):
    ckpt = checkpoint(tmp_path / "model.ckpt")
    with pytest.raises(ValueError, match=r"'qwen2 GGUF'.*model.mixer.qkv_bias=False \(would load as True\)"):
        zoo.export(ckpt, tmp_path / "out", format="gguf", model_type="qwen2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ckpt"]


def _bpe(pre, normalizer=None, decoder=None, wordpiece=False) -> ZooTokenizer:
    """A tokenizer trained here with zoo's specials at 0-4: byte-level BPE, or WordPiece (`wordpiece`)."""
    hf = HFTokenizer(models.WordPiece() if wordpiece else models.BPE())
    hf.pre_tokenizer, hf.normalizer, hf.decoder = pre, normalizer, decoder or decoders.ByteLevel()
    trainer = trainers.WordPieceTrainer if wordpiece else trainers.BpeTrainer
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    hf.train_from_iterator(TEXT, trainer(vocab_size=270, special_tokens=list(SPECIAL_TOKENS),
                                         show_progress=False, initial_alphabet=alphabet))
    return ZooTokenizer(hf, kind="bpe")


BYTES = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)


@pytest.mark.parametrize(("tokenizer", "named"), [
    (lambda: _bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), normalizers.NFC()),
     "normalizes text first (NFC), which llama.cpp's BPE does not do"),
    (lambda: _bpe(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\p{L}+|\s+|."), "isolated"), BYTES])),
     "splits text with a pre-tokenizer llama.cpp has no name for"),
    (lambda: _bpe(pre_tokenizers.ByteLevel(add_prefix_space=True)),
     "splits text with a pre-tokenizer llama.cpp has no name for"),
    (lambda: _bpe(pre_tokenizers.Whitespace(), decoder=decoders.WordPiece(), wordpiece=True),
     "is a WordPiece model; GGUF export carries byte-level BPE tokenizers only"),
], ids=["normalizer", "other-split", "prefix-space", "wordpiece"])
def test_a_tokenizer_llama_cpp_cannot_express_is_refused_by_name(tokenizer, named, tmp_path):
    tok = tokenizer()
    model = zoo.build("llama_small", vocab_size=tok.vocab_size, **TINY)
    with pytest.raises(ValueError) as err:
        plan_gguf(model, tok, "f32")
    assert named in str(err.value)
    assert not (tmp_path / GGUF_FILE).exists()


def test_a_tokenizer_and_model_that_do_not_belong_together_are_refused(tmp_path):
    tok = train_bpe(TEXT, vocab_size=270, min_frequency=1)
    small = zoo.build("llama_small", vocab_size=tok.vocab_size - 1, **TINY)
    with pytest.raises(ValueError, match=r"the bpe tokenizer has \d+ tokens but the model only \d+ embedding "
                                         r"rows; GGUF needs a token for every row"):
        plan_gguf(small, tok, "f32")
    other_ids = zoo.build("llama_small", vocab_size=tok.vocab_size, bos_id=7, **TINY)  # the file's BOS: 1
    with pytest.raises(ValueError, match=r"model.bos_id=7 \(would load as 1\)"):
        plan_gguf(other_ids, tok, "f32")


def test_the_name_written_never_makes_llama_cpp_look_up_tokens_the_vocabulary_lacks():
    """llama.cpp fails to load a file whose general.name says phi3 but whose vocabulary lacks Phi-3's
    '</s>', '<unk>', '<s>', '<|endoftext|>' (checked against llama.cpp itself in test_gguf_llama_cpp)."""
    from zoo.pretrained.gguf_file import model_name
    from zoo.tokenizers.gguf_vocab import GGUFVocab

    def vocab(tokens):
        return GGUFVocab("gpt-2", list(tokens), [1] * len(tokens), [], {}, False, False, None)

    assert model_name("phi3", vocab(["a", "b", "<eos>"])) == "zoo"
    assert model_name("phi3", vocab(["</s>", "<unk>", "<s>", "<|endoftext|>", "a"])) == "zoo phi3"
    assert model_name("llama", vocab(["a"])) == "zoo llama"
