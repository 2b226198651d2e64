"""A config.json whose sizes disagree with its weight files is refused at once, naming the config key, its
value and what the weights say: the layer count from the safetensors headers before any tensor is read or any
model built (a million layers were built on the meta device for minutes first), a width from the first tensor
it disagrees with, before the model is allocated. from_pretrained, init_from= and load_config alike; single
file, sharded index and pickled weights. Times are this process's CPU seconds (others' load does not
count)."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
import transformers

import zoo
import zoo.pretrained.api as api
import zoo.pretrained.family as family
from tests.pretrained.helpers import perturbed
from zoo.finetune.init_from import InitError, open_source

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=40, vocab_size=99, max_position_embeddings=40)
SAVES = {"single": {}, "sharded": {"max_shard_size": "20KB"}}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sizes")
    torch.manual_seed(0)
    model = perturbed(transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)))
    out = {name: root / name for name in SAVES}
    for name, kwargs in SAVES.items():
        model.save_pretrained(out[name], **kwargs)
    out["bin"] = root / "bin"
    out["bin"].mkdir()
    shutil.copy(out["single"] / "config.json", out["bin"])
    torch.save(model.state_dict(), out["bin"] / "pytorch_model.bin")
    assert (out["sharded"] / "model.safetensors.index.json").is_file()
    return out


def edited(folder: Path, tmp_path: Path, **keys) -> Path:
    """A copy of `folder` whose config.json has `keys` changed."""
    copy = shutil.copytree(folder, tmp_path / folder.name)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **keys}))
    return copy


def forbid(monkeypatch, *names: str) -> None:
    """Any call of these steps (reading the tensors, the meta build of the shapes, the model) fails."""
    def fail(*args, **kwargs):
        raise AssertionError("reached a step the size check must come before")
    where = {"read_weights": api, "build_model": api, "zoo_shapes": family}
    for name in names:
        monkeypatch.setattr(where[name], name, fail)


LAYERS = r"config.json num_hidden_layers=1000000 \(model.n_layers\) disagrees with the weights: {} holds " \
         r"layers 0-1 \(2 layers\)"


@pytest.mark.parametrize("save", list(SAVES))
def test_a_million_layers_is_refused_from_the_headers(folders, tmp_path, monkeypatch, save):
    folder = edited(folders[save], tmp_path, num_hidden_layers=1_000_000)
    forbid(monkeypatch, "read_weights", "zoo_shapes", "build_model")
    source = "model.safetensors" + (".index.json" if save == "sharded" else "")
    start = time.process_time()
    with pytest.raises(ValueError, match=LAYERS.format(f".*{source}")) as err:
        zoo.from_pretrained(folder)
    assert time.process_time() - start < 1.0
    said = "config.json num_hidden_layers=1000000 (model.n_layers) disagrees with the weights"
    assert said in str(err.value)


def test_pickled_weights_are_checked_once_read(folders, tmp_path, monkeypatch):
    folder = edited(folders["bin"], tmp_path, num_hidden_layers=1_000_000)
    forbid(monkeypatch, "zoo_shapes", "build_model")
    start = time.process_time()
    with pytest.raises(ValueError, match=LAYERS.format(".*pytorch_model.bin")):
        zoo.from_pretrained(folder)
    assert time.process_time() - start < 1.0


def test_init_from_and_load_config_refuse_it_before_the_plan_builds_it(folders, tmp_path, monkeypatch):
    folder = edited(folders["single"], tmp_path, num_hidden_layers=1_000_000)
    forbid(monkeypatch, "read_weights", "zoo_shapes", "build_model")
    named = rf"init_from={folder} \(Hugging Face folder\): " + LAYERS.format(".*")
    with pytest.raises(InitError, match=named):
        open_source(str(folder))
    with pytest.raises(ValueError, match=LAYERS.format(".*")):
        zoo.pretrained.load_config(folder)


@pytest.mark.parametrize(("key", "value", "named"), [
    ("hidden_size", 320, "config.json hidden_size=320 (model.d_model)"),
    ("intermediate_size", 400, "config.json intermediate_size=400 (model.d_ff)"),
    ("vocab_size", 2**31 - 1, "config.json vocab_size=2147483647 (model.vocab_size)"),  # the largest allowed
], ids=["hidden_size", "intermediate_size", "vocab_size"])
def test_a_width_is_named_by_its_key_before_the_model_is_built(folders, tmp_path, monkeypatch, key, value,
                                                                named):
    folder = edited(folders["sharded"], tmp_path, **{key: value})
    forbid(monkeypatch, "build_model")
    start = time.process_time()
    said = (re.escape(named) + r" disagrees with the weights: tensor 'model\..*' in .* "
            r"has shape \(\d+, \d+\), where config.json implies")
    with pytest.raises(ValueError, match=said):
        zoo.from_pretrained(folder)
    assert time.process_time() - start < 1.0


def test_an_encoder_decoder_names_the_stack(tmp_path):
    config = transformers.BartConfig(d_model=16, encoder_layers=2, decoder_layers=1, vocab_size=50,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=24,
                                     decoder_ffn_dim=24, max_position_embeddings=32)
    transformers.BartForConditionalGeneration(config).save_pretrained(tmp_path / "bart")
    folder = edited(tmp_path / "bart", tmp_path / "edited", decoder_layers=3)
    with pytest.raises(ValueError, match=r"config.json decoder_layers=3 \(model.decoder_layers\) disagrees "
                                         r"with the weights: .* holds decoder layer 0 \(1 layer\)"):
        zoo.from_pretrained(folder)


def test_sizes_that_agree_still_load(folders):
    assert len(zoo.from_pretrained(folders["sharded"]).decoder_stack.layers) == 2
