"""Bad init_from / finetune input: one clear error each, before any data is read or anything written."""

from __future__ import annotations

import shutil

import pytest

from zoo.apps import ConfigError
from zoo.training.run import train

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
    assert (message.startswith(f"init_from={broken} (Hugging Face folder): ")
            and "model.safetensors" in message)
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
    assert message == (f"init_from={bare}: Hugging Face folder {bare} has no tokenizer (no tokenizer.json); "
                       "give the tokenizer the model was trained with: tokenizer=hf tokenizer.path=FOLDER or "
                       "tokenizer=file tokenizer.path=tokenizer.json")


def test_shape_changing_override(make_run_cfg, tmp_path, folders):
    message = attempt(make_run_cfg, tmp_path, f"init_from={folders['gpt2']}", "model.max_seq_len=32")
    assert message == ("model.max_seq_len=32 would change the shape of the pretrained weights of "
                       f"{folders['gpt2']}: embed.positional.table.weight (64, 32) -> (32, 32); only "
                       "overrides that keep every weight's shape apply with init_from "
                       "(e.g. model.dropout, model.attn_dropout)")
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
        f"init_from={notes} (zoo checkpoint): {notes} is not a PyTorch checkpoint "
        "(it starts with b'def main():\\n': text or another format)")


def _folder_with_a_larger_tokenizer(folders, tmp_path):
    """The GPT-2 folder (320 tokens) with its embedding cut to 300 rows: config.json and weights agree, and
    the folder's own tokenizer has 20 tokens the model has no row for (its files do not belong together)."""
    import json

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "mismatched"
    shutil.copytree(folders["gpt2"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] = 300
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(folder / "model.safetensors")
    tensors = {k: v[:300].contiguous() if k.endswith("wte.weight") or k == "lm_head.weight" else v
               for k, v in tensors.items()}
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_own_tokenizer_larger_than_the_embedding_is_refused_before_any_data(make_run_cfg, tmp_path, folders):
    folder = _folder_with_a_larger_tokenizer(folders, tmp_path)
    with pytest.raises(ConfigError) as err:
        train(make_run_cfg(["data=text", f"data.files={folders['corpus']}", *FAST, "trainer.max_steps=2",
                            f"init_from={folder}"]))
    assert str(err.value) == (
        f"init_from={folder}: the tokenizer shipped in Hugging Face folder {folder} has 320 tokens but its "
        "model has 300 embedding rows (config vocab_size), so the two do not belong together; give the "
        "tokenizer the model was trained with, of at most 300 tokens: tokenizer=hf tokenizer.path=FOLDER or "
        "tokenizer=file tokenizer.path=tokenizer.json")
    # nothing tokenized or cached
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()


def test_given_tokenizer_larger_than_the_embedding_is_refused_before_any_data(make_run_cfg, tmp_path,
                                                                              folders):
    """A tokenizer read from files (tokenizer=hf / file) is sized before the data is read; the advice to use
    the folder's own tokenizer is given only when that one fits."""
    from tokenizers import Tokenizer

    larger = tmp_path / "larger"
    shutil.copytree(folders["gpt2"], larger)
    tok = Tokenizer.from_file(str(larger / "tokenizer.json"))
    tok.add_tokens([f"<extra_{i}>" for i in range(20)])  # 320 -> 340
    tok.save(str(larger / "tokenizer.json"))
    run = ["data=text", f"data.files={folders['corpus']}", *FAST, "trainer.max_steps=2", "tokenizer=hf",
           f"tokenizer.path={larger}"]
    with pytest.raises(ConfigError) as err:
        train(make_run_cfg([*run, f"init_from={folders['gpt2']}"]))
    assert str(err.value) == (
        f"init_from={folders['gpt2']}: the tokenizer given (tokenizer=hf) has 340 tokens but the model has "
        "320 embedding rows (config vocab_size); use the model's own tokenizer (leave tokenizer= unset) or "
        "one of at most 320 tokens")
    mismatched = _folder_with_a_larger_tokenizer(folders, tmp_path)  # its own tokenizer does not fit either
    with pytest.raises(ConfigError) as err:
        train(make_run_cfg([*run, f"init_from={mismatched}"]))
    assert str(err.value).endswith("has 340 tokens but the model has 300 embedding rows (config vocab_size); "
                                   "give a tokenizer of at most 300 tokens "
                                   "(the one the model was trained with)")
    # nothing tokenized or cached
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()
