"""Bad init_from / finetune input: one clear error each, before any data is read or anything written."""

from __future__ import annotations

import shutil

import pytest

from zoo.training.run import ConfigError, train

from .conftest import FAST


def attempt(make_run_cfg, tmp_path, *overrides: str):
    with pytest.raises(ConfigError) as err:
        train(make_run_cfg(["data=text", "data.files=none.txt", *FAST, "trainer.max_steps=2", *overrides]))
    assert not (tmp_path / "runs").exists()  # nothing written (and data.files was never read)
    return str(err.value)


def test_missing_folder(make_run_cfg, tmp_path):
    assert attempt(make_run_cfg, tmp_path, f"init_from={tmp_path / 'nope'}") == (
        f"init_from={tmp_path / 'nope'}: no such file or folder")


def test_folder_that_is_not_a_model(make_run_cfg, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hi")
    message = attempt(make_run_cfg, tmp_path, f"init_from={tmp_path / 'notes'}")
    assert "not a model: expected a Hugging Face folder" in message and "(found: readme.txt)" in message


def test_corrupt_weights(make_run_cfg, tmp_path, folders):
    broken = tmp_path / "broken"
    shutil.copytree(folders["gpt2"], broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    message = attempt(make_run_cfg, tmp_path, f"init_from={broken}")
    assert message.startswith(f"init_from={broken} (Hugging Face folder): ") and "model.safetensors" in message
    assert "truncated or corrupt" in message


def test_corrupt_config(make_run_cfg, tmp_path, folders):
    broken = tmp_path / "broken"
    shutil.copytree(folders["gpt2"], broken)
    (broken / "config.json").write_text('{"model_type": "gpt2", "n_embd": 32')
    message = attempt(make_run_cfg, tmp_path, f"init_from={broken}")
    assert "config.json" in message and "not a model" in message  # not JSON: no model_type to go by


def test_folder_without_tokenizer(make_run_cfg, tmp_path, folders):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(folders["gpt2"] / name, bare / name)
    message = attempt(make_run_cfg, tmp_path, f"init_from={bare}")
    assert message == (f"init_from={bare}: Hugging Face folder {bare} has no tokenizer (no tokenizer.json); give "
                       "the tokenizer the model was trained with: tokenizer=hf tokenizer.path=FOLDER or "
                       "tokenizer=file tokenizer.path=tokenizer.json")


def test_shape_changing_override(make_run_cfg, tmp_path, folders):
    message = attempt(make_run_cfg, tmp_path, f"init_from={folders['gpt2']}", "model.max_seq_len=32")
    assert message == (f"model.max_seq_len=32 would change the shape of the pretrained weights of {folders['gpt2']}: "
                       "embed.positional.table.weight (64, 32) -> (32, 32); only overrides that keep every "
                       "weight's shape apply with init_from (e.g. model.dropout, model.attn_dropout)")
    message = attempt(make_run_cfg, tmp_path, f"init_from={folders['gpt2']}", "model.d_model=64")
    assert message.startswith("model.d_model=64 would change the shape of the pretrained weights of ")
    assert "(32,) -> (64,) (and 26 more)" in message


def test_shape_keeping_override_applies(make_run_cfg, folders):
    from zoo.training.plan import prepare

    plan = prepare(make_run_cfg([f"init_from={folders['gpt2']}", "data=text", "data.files=x.txt", *FAST,
                                 "model.dropout=0.3"]))
    assert plan.model.dropout == 0.3 and plan.model.d_model == 32  # the folder's shape, the user's dropout


def test_model_choice_is_refused(make_run_cfg, tmp_path, folders):
    message = attempt(make_run_cfg, tmp_path, f"init_from={folders['gpt2']}", "model=bert_small")
    assert "drop the model=... choice" in message


def test_unknown_lora_target(make_run_cfg, tmp_path, folders):
    message = attempt(make_run_cfg, tmp_path, f"init_from={folders['gpt2']}", "finetune=lora",
                      "finetune.targets=[self_attn.qkv,ffn.upp]")
    assert message.startswith("finetune.targets: Unknown LoRA target module 'ffn.upp'. Did you mean")
    assert "decoder_stack.ffn.up" in message


def test_unknown_finetune_key(make_run_cfg, tmp_path):
    message = attempt(make_run_cfg, tmp_path, "finetune=lora", "+finetune.rnak=4")
    assert "Unknown key 'finetune.rnak'" in message and "Did you mean 'finetune.rank'?" in message


def test_a_text_file_starting_with_d_is_not_a_pytorch_checkpoint(make_run_cfg, tmp_path):
    """'d' is a pickle opcode: torch's weights-only unpickler used to make this "a pickle that needs code"."""
    notes = tmp_path / "notes.txt"
    notes.write_text("def main():\n    pass\n")
    assert attempt(make_run_cfg, tmp_path, f"init_from={notes}") == (
        f"init_from={notes} (zoo checkpoint): {notes} is not a PyTorch checkpoint (it starts with b'def main():\\n': "
        "text or another format)")
