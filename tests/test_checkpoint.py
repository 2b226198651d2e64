"""zoo/checkpoint.py's training-checkpoint helpers: RNG states and tokenizer files survive a weights_only
round trip, and the `zoo` section holds exactly the plain data a checkpoint needs."""

from __future__ import annotations

import io
import random

import numpy as np
import torch

from zoo.checkpoint import (
    FORMAT_VERSION,
    atomic_torch_save,
    rng_states,
    set_rng_states,
    zoo_section,
)
from zoo.config import ModelConfig
from zoo.data import TOKENIZERS
from zoo.tokenizers.texts import tokenizer_from_texts, tokenizer_texts

TEXTS = ["the cat sat on the mat", "a dog ran far away"]


def _draws() -> tuple:
    return random.random(), np.random.rand(3).tolist(), np.random.randn(), torch.rand(3).tolist()


def _weights_only_round_trip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_rng_states_round_trip_replays_every_generator():
    random.seed(1)
    np.random.seed(2)
    np.random.randn()  # leaves a cached gaussian in NumPy's state: it must come back too
    torch.manual_seed(3)
    states = _weights_only_round_trip(rng_states())
    expected = _draws()
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    assert _draws() != expected
    set_rng_states(states)
    assert _draws() == expected


def test_tokenizer_files_round_trip(tmp_path):
    tok = TOKENIZERS.get("char")(TEXTS)
    tok.label_names = ["neg", "pos"]
    files = tokenizer_texts(tok)
    tok.save(tmp_path / "saved")
    assert files == {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "saved").iterdir()}
    assert all(isinstance(text, str) for text in files.values())  # plain text: weights_only can read it
    back = tokenizer_from_texts(_weights_only_round_trip(files))
    assert back.vocab_size == tok.vocab_size and back.label_names == ["neg", "pos"]
    for text in [*TEXTS, "unseen ✓"]:
        assert back.encode(text) == tok.encode(text)
    assert tokenizer_texts(back) == files


def test_zoo_section_is_plain_data_that_rebuilds_config_and_tokenizer(tmp_path):
    tok = TOKENIZERS.get("char")(TEXTS)
    config = ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, positional="rope")
    torch.manual_seed(5)
    section = zoo_section(config, "lm", tok)
    expected = torch.rand(4)  # the first draw after the saved state
    assert set(section) == {"format_version", "model_config", "task", "tokenizer_files", "rng"}
    assert section["format_version"] == FORMAT_VERSION and section["task"] == "lm"
    assert section["tokenizer_files"] == tokenizer_texts(tok)
    path = tmp_path / "run.ckpt"
    atomic_torch_save({"state_dict": {}, "zoo": section}, path)
    loaded = torch.load(path, weights_only=True)["zoo"]
    assert ModelConfig.from_dict(loaded["model_config"]) == config
    assert tokenizer_from_texts(loaded["tokenizer_files"]).encode("a cat") == tok.encode("a cat")
    set_rng_states(loaded["rng"])
    torch.testing.assert_close(torch.rand(4), expected, rtol=0, atol=0)
