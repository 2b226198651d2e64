"""Bad checkpoints fail early with errors that say what is wrong and what is allowed."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

import zoo
from tests.pretrained.helpers import saved


class NotATensor:  # a custom class: unpickling it needs arbitrary code
    def __init__(self) -> None:
        self.payload = [1, 2, 3]


@pytest.fixture
def gpt2_dir(tmp_path):
    cfg = GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=16, bos_token_id=1,
                     eos_token_id=2)
    return saved(GPT2LMHeadModel(cfg), tmp_path)


def test_directory_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="has no config.json.*model.safetensors"):
        zoo.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        zoo.from_pretrained(tmp_path / "nope")


def test_unsupported_model_type_lists_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlnet"}))
    with pytest.raises(ValueError,
                       match=r"Unknown Hugging Face model_type 'xlnet'.*Allowed: bart, bert, .*marian.*t5"):
        zoo.from_pretrained(tmp_path)


def test_unsupported_setting_is_named(gpt2_dir):
    config = json.loads((gpt2_dir / "config.json").read_text())
    config["scale_attn_by_inverse_layer_idx"] = True
    (gpt2_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx=True"):
        zoo.from_pretrained(gpt2_dir)


def test_mismatched_shape_names_tensor_and_both_shapes(gpt2_dir):
    file = gpt2_dir / "model.safetensors"
    tensors = load_file(file)
    tensors["transformer.h.0.mlp.c_fc.weight"] = torch.zeros(16, 40)
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"'transformer.h.0.mlp.c_fc.weight'.*\(16, 40\).*\(16, 64\)"):
        zoo.from_pretrained(gpt2_dir)


def test_missing_tensors_are_listed(gpt2_dir):
    file = gpt2_dir / "model.safetensors"
    tensors = load_file(file)
    del tensors["transformer.ln_f.bias"], tensors["transformer.h.0.ln_2.weight"]
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(ValueError,
                       match=r"missing 2 tensor.*transformer.h.0.ln_2.weight.*transformer.ln_f.bias"):
        zoo.from_pretrained(gpt2_dir)


def test_unknown_extra_tensor_is_an_error(gpt2_dir):
    file = gpt2_dir / "model.safetensors"
    tensors = load_file(file)
    tensors["transformer.h.0.adapter.weight"] = torch.zeros(3)
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(ValueError, match="does not know how to load: transformer.h.0.adapter.weight"):
        zoo.from_pretrained(gpt2_dir)


def test_pytorch_bin_loads_with_weights_only(gpt2_dir):
    file = gpt2_dir / "model.safetensors"
    reference = zoo.from_pretrained(gpt2_dir)
    torch.save(load_file(file), gpt2_dir / "pytorch_model.bin")
    file.unlink()
    model = zoo.from_pretrained(gpt2_dir)
    ids = torch.randint(0, 50, (1, 6))
    assert torch.equal(model(ids).logits, reference(ids).logits)


def test_pickle_needing_code_is_refused_by_name(gpt2_dir):
    (gpt2_dir / "model.safetensors").unlink()
    state = {"transformer.wte.weight": torch.zeros(50, 16), "evil": NotATensor()}
    torch.save(state, gpt2_dir / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pytorch_model.bin' is a pickle that needs arbitrary code"):
        zoo.from_pretrained(gpt2_dir)


def test_directory_without_weights(gpt2_dir):
    (gpt2_dir / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no weights: expected one of model.safetensors"):
        zoo.from_pretrained(gpt2_dir)


def test_export_of_unrepresentable_model_explains_each_family(tmp_path):
    model = zoo.build({"arch": "decoder", "positional": "alibi", "vocab_size": 32, "d_model": 16,
                       "n_heads": 2})
    with pytest.raises(ValueError, match=r"(?s)No Hugging Face family.*'gpt2': its config.json cannot "
                                         r"express model.positional='alibi' \(would load as 'learned'\)"):
        zoo.save_pretrained(model, tmp_path / "out")
    with pytest.raises(ValueError, match="Unknown Hugging Face model_type 'xlnet'"):
        zoo.save_pretrained(model, tmp_path / "out", model_type="xlnet")


def test_missing_config_key_names_file_and_key(gpt2_dir):
    config = json.loads((gpt2_dir / "config.json").read_text())
    del config["n_embd"]
    (gpt2_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError,
                       match=rf"{gpt2_dir / 'config.json'} has no 'n_embd', which a gpt2 checkpoint needs"):
        zoo.from_pretrained(gpt2_dir)


@pytest.mark.parametrize("model_type", sorted(zoo.pretrained.FAMILIES.names()))
def test_every_family_names_a_missing_key(tmp_path, model_type):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(ValueError, match=rf"config.json has no '\w+', which a {model_type} checkpoint needs"):
        zoo.from_pretrained(tmp_path)


def test_config_that_is_not_utf8_names_the_file(tmp_path):
    (tmp_path / "config.json").write_bytes(b'{"model_type": "gpt2\xff"}')
    with pytest.raises(ValueError, match=r"config.json is not valid UTF-8 JSON"):
        zoo.from_pretrained(tmp_path)


def test_truncated_weights_name_the_file(gpt2_dir):
    file = gpt2_dir / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-100])
    with pytest.raises(ValueError, match=rf"{file}' is not a readable safetensors file"):
        zoo.from_pretrained(gpt2_dir)
    torch.save({"x": torch.zeros(100, 100)}, gpt2_dir / "pytorch_model.bin")
    file.unlink()
    bin_file = gpt2_dir / "pytorch_model.bin"
    bin_file.write_bytes(bin_file.read_bytes()[:2000])
    with pytest.raises(ValueError, match=rf"{bin_file}' is not a readable PyTorch file \(truncated"):
        zoo.from_pretrained(gpt2_dir)


def test_bad_shard_index_names_the_file(gpt2_dir):
    (gpt2_dir / "model.safetensors").unlink()
    (gpt2_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ValueError, match=r"model.safetensors.index.json has no 'weight_map'"):
        zoo.from_pretrained(gpt2_dir)


def test_refused_pickle_drops_torchs_weights_only_false_advice(gpt2_dir):
    (gpt2_dir / "model.safetensors").unlink()
    torch.save({"evil": NotATensor()}, gpt2_dir / "pytorch_model.bin")
    with pytest.raises(ValueError) as info:
        zoo.from_pretrained(gpt2_dir)
    message = str(info.value)
    assert "NotATensor" in message and "never unpickles untrusted code" in message
    assert "weights_only=False" not in message and "likely succeed" not in message


def test_shard_names_must_stay_in_the_folder(gpt2_dir, tmp_path):
    """A shard index pointing outside its folder is refused (it could read another model's weights)."""
    (gpt2_dir / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    index = {"metadata": {}, "weight_map": {"transformer.wte.weight": "../elsewhere.safetensors"}}
    (gpt2_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError,
                       match=r"names shard files outside its folder: \['../elsewhere.safetensors'\]"):
        zoo.from_pretrained(gpt2_dir)


def test_pytorch_bin_is_read_before_its_index_like_transformers(gpt2_dir):
    """transformers reads pytorch_model.bin before pytorch_model.bin.index.json; zoo loads the same file."""
    reference = zoo.from_pretrained(gpt2_dir)
    state = load_file(gpt2_dir / "model.safetensors")
    torch.save(state, gpt2_dir / "pytorch_model.bin")
    stale = {k: torch.zeros_like(v) for k, v in state.items()}
    torch.save(stale, gpt2_dir / "old-00001.bin")
    index = {"metadata": {}, "weight_map": {k: "old-00001.bin" for k in stale}}
    (gpt2_dir / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    (gpt2_dir / "model.safetensors").unlink()
    ids = torch.randint(0, 50, (1, 6))
    assert torch.equal(zoo.from_pretrained(gpt2_dir)(ids).logits, reference(ids).logits)
