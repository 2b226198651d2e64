"""Bad training checkpoints and exports fail when opened, with one error naming the file and the tensor or
key: wrong shapes, missing config, bad JSON, truncated files, pickles that need code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import zoo
from zoo.apps import ConfigError
from zoo.checkpoint import CheckpointError, atomic_torch_save, read_checkpoint, zoo_section
from zoo.data import TOKENIZERS
from zoo.export import export
from zoo.training.plan import resolve_ckpt_path
from zoo.training.run import read_resumed

FFN_UP = "decoder_stack.layers.0.ffn.up.weight"


class NotATensor:  # unpickling this needs code outside torch's weights-only allow-list
    pass


def _save(tmp_path: Path, edit=lambda state, section: None) -> Path:
    """A tiny decoder's training checkpoint; `edit(state_dict, zoo_section)` breaks it first."""
    tok = TOKENIZERS["char"](["the cat sat", "a dog ran"])
    model = zoo.build(dict(arch="decoder", vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2,
                           max_seq_len=16))
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    section = zoo_section(model.config, "lm", tok)
    edit(state, section)
    path = tmp_path / "tiny.ckpt"
    atomic_torch_save({"state_dict": state, "zoo": section}, path)
    return path


def _wrong_shape(state, section):
    state[f"model.{FFN_UP}"] = torch.zeros(3, 16)


def test_good_checkpoint_and_export_load(tmp_path):
    path = _save(tmp_path)
    model, _ = zoo.load(export(path, tmp_path / "export"))  # tied head stored once in the export
    assert torch.equal(model.state_dict()["head.proj.weight"],
                       zoo.load(path)[0].state_dict()["head.proj.weight"])


def test_wrong_shaped_tensor_is_named_by_every_reader(tmp_path):
    path = _save(tmp_path, _wrong_shape)
    message = rf"{path}: the weights do not fit .*{FFN_UP} has shape \(3, 16\), the model needs \(64, 16\)"
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path)
    with pytest.raises(CheckpointError, match=message):
        zoo.load(path)
    with pytest.raises(ConfigError, match=rf"ckpt_path={path}: .*{FFN_UP}"):  # train.py, before any data
        read_resumed(resolve_ckpt_path(str(path), tmp_path, tmp_path / "run"), str(path))


def test_missing_and_unknown_tensors_are_listed(tmp_path):
    def edit(state, section):
        del state["model.decoder_stack.final_norm.weight"]
        state["model.adapter.weight"] = torch.zeros(2)

    with pytest.raises(CheckpointError,
                       match="1 missing tensor: decoder_stack.final_norm.weight; 1 unknown tensor: adapter"):
        read_checkpoint(_save(tmp_path, edit))


def test_missing_or_invalid_model_config_is_named(tmp_path):
    path = _save(tmp_path, lambda state, section: section.pop("model_config"))
    with pytest.raises(CheckpointError, match=rf"{path}: zoo.model_config is missing or not a mapping"):
        zoo.load(path)
    path = _save(tmp_path, lambda state, section: section["model_config"].update(d_modl=8))
    with pytest.raises(CheckpointError,
                       match=r"zoo.model_config is not a valid model config: Unknown .* 'd_modl'"):
        zoo.load(path)


def test_truncated_checkpoint_names_the_file(tmp_path):
    path = _save(tmp_path)
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(CheckpointError, match=rf"{path} is not a readable PyTorch file \(truncated"):
        read_checkpoint(path)


def test_pickle_needing_code_is_refused_without_torchs_retry_advice(tmp_path):
    path = tmp_path / "evil.ckpt"
    torch.save({"zoo": {}, "state_dict": {}, "x": NotATensor()}, path)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    message = str(info.value)
    assert f"{path} is a pickle that needs arbitrary code" in message and "NotATensor" in message
    assert "never unpickles untrusted code" in message
    assert "weights_only=False" not in message and "likely succeed" not in message and "\n" not in message


@pytest.mark.parametrize("text", ["def main():\n    pass\n", "class Note:\n", "(draft)\n", "hello\n"])
def test_a_text_file_is_not_a_pytorch_checkpoint_whatever_its_first_letter(tmp_path, text):
    """'d', 'c' and '(' are pickle opcodes, so torch's weights-only unpickler reads such text as a pickle and
    refuses it like one that needs code; the file is text, and is named as not a PyTorch checkpoint."""
    path = tmp_path / "notes.ckpt"
    path.write_text(text)
    expected = (f"{path} is not a PyTorch checkpoint "
                f"(it starts with {text.encode()[:12]!r}: text or another format)")
    for read in (read_checkpoint, zoo.load):
        with pytest.raises(CheckpointError) as info:
            read(path)
        assert str(info.value) == expected


@pytest.fixture
def export_dir(tmp_path) -> Path:
    return export(_save(tmp_path), tmp_path / "export")


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", r"config.json is not valid JSON"),
        (json.dumps({"format_version": 1}),
         r"config.json has no 'model_config', so .*export is not a zoo export"),
        (json.dumps({"model_type": "gpt2"}),
         r"no 'model_config'.*Hugging Face config: load that folder with zoo.from_pretrained"),
        (json.dumps({"format_version": 1, "model_config": {"arch": "decoder", "d_model": 0}}),
         r"config.json: model_config is not a valid model config: model.d_model must be a positive integer"),
    ],
)
def test_bad_export_config_names_the_file(export_dir, text, match):
    (export_dir / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError, match=match):
        zoo.load(export_dir)


def test_wrong_shaped_export_tensor_is_named(export_dir):
    file = export_dir / "model.safetensors"
    tensors = load_file(file)
    tensors[FFN_UP] = torch.zeros(3, 16)
    save_file(tensors, file)
    with pytest.raises(CheckpointError,
                       match=rf"model.safetensors does not fit .*{FFN_UP} has shape \(3, 16\)"):
        zoo.load(export_dir)


def test_truncated_export_names_the_file(export_dir):
    file = export_dir / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=rf"{file} is not a readable safetensors file"):
        zoo.load(export_dir)


def test_generate_stops_on_a_wrong_shaped_checkpoint_naming_the_tensor(tmp_path):
    """generate.py prints a ValueError as one `error:` line and exits 2 (tests/generation/test_cli.py runs the
    script); a wrong-shaped checkpoint reaches it as a CheckpointError naming the tensor."""
    from zoo.generate_cli import main

    path = _save(tmp_path, _wrong_shape)
    assert issubclass(CheckpointError, ValueError)
    with pytest.raises(CheckpointError, match=rf"{path}: the weights do not fit .*{FFN_UP}"):
        main([f"ckpt={path}", "prompt=the"])
