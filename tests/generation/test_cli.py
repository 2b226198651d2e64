"""generate.py: overrides parsed against the schema, checkpoints opened with zoo.load, outputs equal
model.generate on the same ids, clear errors (including a checkpoint without a tokenizer)."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
from zoo.checkpoint import atomic_torch_save, zoo_section
from zoo.data import TOKENIZERS
from zoo.generate_cli import CLI_DEFAULTS, GenerateCLIConfig, main, parse_overrides
from zoo.generation.config import GenerationConfig
from zoo.tokenizers import load_hf_tokenizer

TEXTS = ["the cat sat on the mat", "a dog ran far away", "hello world"]
ROOT = Path(__file__).resolve().parents[2]


def _checkpoint(tmp_path: Path, arch: str, with_tokenizer: bool = True,
                tok=None, **over) -> tuple[Path, object, object]:
    tok = TOKENIZERS["char"](TEXTS) if tok is None else tok
    torch.manual_seed(0)
    model = zoo.build(dict(arch=arch, vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2,
                           positional="rope", max_seq_len=32, dropout=0.0, **over)).eval()
    section = zoo_section(model.config, "lm" if arch == "decoder" else "seq2seq", tok)
    if not with_tokenizer:
        section["tokenizer_files"] = {}
    path = tmp_path / f"{arch}.ckpt"
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": section}, path)
    return path, model, tok


def test_decoder_end_to_end_matches_library(tmp_path):
    path, model, tok = _checkpoint(tmp_path, "decoder")
    out = io.StringIO()
    main([f"ckpt={path}", "prompt=the cat", "max_new_tokens=6", "num_beams=2"], stdout=out)
    ids = tok.encode("the cat")
    expected = model.generate([ids], max_new_tokens=6, num_beams=2, eos_token_id=tok.eos_id)[0, len(ids):]
    assert out.getvalue().splitlines() == [">>> the cat", "the cat" + tok.decode(expected)]


def test_encoder_decoder_file_and_sampling(tmp_path):
    path, model, tok = _checkpoint(tmp_path, "encoder_decoder")
    src_file = tmp_path / "src.txt"
    src_file.write_text("hello world\n\na dog\n", encoding="utf-8")
    out = io.StringIO()
    main([f"ckpt={path}", f"src_file={src_file}", "max_new_tokens=5", "do_sample=true", "top_p=0.9", "seed=3",
          "num_return_sequences=2"], stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == ">>> hello world" and lines[3] == ">>> a dog" and lines[1].startswith("[0] ")
    expected = model.generate([tok.encode("hello world"), tok.encode("a dog")], max_new_tokens=5,
                              do_sample=True, top_p=0.9, seed=3, num_return_sequences=2,
                              eos_token_id=tok.eos_id)
    assert lines[2] == "[1] " + tok.decode(expected[1, 1:])


def test_interactive_reads_until_empty_line(tmp_path):
    path, _, _ = _checkpoint(tmp_path, "decoder")
    out = io.StringIO()
    main([f"ckpt={path}", "interactive=true", "max_new_tokens=3"],
         stdin=io.StringIO("hello\nthe\n\nignored\n"), stdout=out)
    assert [line for line in out.getvalue().splitlines() if line.startswith(">>>")] == [">>> hello",
                                                                                        ">>> the"]


def test_decoding_keys_are_generation_config_fields_with_one_stated_default():
    parsed = parse_overrides(["ckpt=x", "prompt=a"]).decoding()
    assert parsed == dataclasses.replace(GenerationConfig(), max_new_tokens=64)
    assert CLI_DEFAULTS == {"max_new_tokens": 64}
    cli = {f.name: (f.type, f.default) for f in dataclasses.fields(GenerateCLIConfig)}
    for f in dataclasses.fields(GenerationConfig):
        if f.name not in ("eos_token_id", "pad_token_id", "return_dict"):
            assert cli[f.name] == (f.type, CLI_DEFAULTS.get(f.name, f.default)), f.name
    assert parse_overrides(["ckpt=x", "prompt=a", "max_new_tokens=7", "top_k=3",
                            "do_sample=true"]).decoding() == \
        GenerationConfig(max_new_tokens=7, top_k=3, do_sample=True)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["prompt=hi"], "ckpt=PATH is required"),
        (["ckpt=x"], "Give prompt="),
        (["ckpt=x", "prompt=a", "src=b"], "one input source"),
        (["ckpt=x", "prompt=a", "max_new_token=3"], "Did you mean 'max_new_tokens'"),
        (["ckpt=x", "prompt=a", "num_beams=0"], "num_beams must be an integer >= 1"),
        (["ckpt=x", "prompt=a", "do_sample=true", "top_p=2"], "top_p"),
        (["ckpt=x", "prompt=a", "max_new_tokens=-1"], "max_new_tokens"),
        (["ckpt=x", "prompt=a", "num_beams=many"], "num_beams='many' is not an integer"),
        (["ckpt=x", "prompt"], "key=value"),
        (["ckpt=x", "prompt=a", "assistant_ckpt=y", "assistant_mtp=true"],
         "assistant_ckpt=... and assistant_mtp=true both choose the draft model; give one"),
    ],
)
def test_bad_overrides(argv, match):
    with pytest.raises(ValueError, match=match):
        parse_overrides(argv)


def test_checkpoint_problems_are_clear(tmp_path):
    path, _, _ = _checkpoint(tmp_path, "decoder", with_tokenizer=False)
    with pytest.raises(ValueError, match="holds no tokenizer"):
        main([f"ckpt={path}", "prompt=hi"])
    good, _, _ = _checkpoint(tmp_path, "decoder")
    with pytest.raises(ValueError, match="does not fit a model.arch='decoder'"):
        main([f"ckpt={good}", "src=hi"])
    with pytest.raises(ValueError, match="not found"):
        main([f"ckpt={tmp_path / 'missing.ckpt'}", "prompt=hi"])


@pytest.mark.e2e
def test_script_exits_with_message(tmp_path):
    """generate.py turns any ValueError (bad overrides, inputs, checkpoints) into one `error:` line, exit
    2."""
    path, _, _ = _checkpoint(tmp_path, "decoder", with_tokenizer=False)
    run = subprocess.run([sys.executable, str(ROOT / "generate.py"), f"ckpt={path}", "prompt=hi"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert (run.stderr.startswith("error: ") and run.stderr.count("\n") == 1
            and "holds no tokenizer" in run.stderr)


def test_prompts_file_that_is_not_utf8_is_named(tmp_path):
    path, _, _ = _checkpoint(tmp_path, "decoder")
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes("caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"prompts_file='{prompts}' is not UTF-8 text .* at byte 3"):
        main([f"ckpt={path}", f"prompts_file={prompts}"])


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "gpu"])
def test_unavailable_device_is_named_before_loading(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError,
                       match=rf"device='{device}' is not available on this machine; available: cpu"):
        parse_overrides(["ckpt=missing.ckpt", "prompt=a", f"device={device}"])


def test_static_cache_and_assistant_from_the_command_line(tmp_path):
    """cache_implementation=static and assistant_ckpt= (speculative, the target as its own draft) print the
    plain greedy continuation; a prompts file runs one prompt at a time with the assistant."""
    path, model, tok = _checkpoint(tmp_path, "decoder")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat\nhello\n", encoding="utf-8")
    plain, static, spec = io.StringIO(), io.StringIO(), io.StringIO()
    main([f"ckpt={path}", f"prompts_file={prompts}", "max_new_tokens=6"], stdout=plain)
    main([f"ckpt={path}", f"prompts_file={prompts}", "max_new_tokens=6", "cache_implementation=static"],
         stdout=static)
    main([f"ckpt={path}", f"prompts_file={prompts}", "max_new_tokens=6", f"assistant_ckpt={path}",
          "num_assistant_tokens=3"], stdout=spec)
    assert static.getvalue() == plain.getvalue() == spec.getvalue()
    assert len(plain.getvalue().splitlines()) == 4


def test_mtp_self_speculation_from_the_command_line(tmp_path, monkeypatch):
    """assistant_mtp=true: the checkpoint's own model.mtp modules draft (assistant_model="mtp", one prompt at
    a time), and the output is the plain greedy continuation; a checkpoint without model.mtp is refused
    naming the key and the checkpoint before anything is generated."""
    import zoo.generation.api as api

    path, _, _ = _checkpoint(tmp_path, "decoder", mtp={"name": "sequential", "depth": 2, "weight": 0.3})
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat\nhello\n", encoding="utf-8")
    drafted = []
    real = api.mtp_speculative_decode
    monkeypatch.setattr(api, "mtp_speculative_decode", lambda *a, **k: drafted.append(1) or real(*a, **k))
    plain, spec = io.StringIO(), io.StringIO()
    main([f"ckpt={path}", f"prompts_file={prompts}", "max_new_tokens=8"], stdout=plain)
    assert drafted == []
    main([f"ckpt={path}", f"prompts_file={prompts}", "max_new_tokens=8", "assistant_mtp=true",
          "num_assistant_tokens=2"], stdout=spec)
    assert drafted == [1, 1]  # one speculative decode per prompt
    assert spec.getvalue() == plain.getvalue() and len(plain.getvalue().splitlines()) == 4
    without, _, _ = _checkpoint(tmp_path / "plain", "decoder")
    with pytest.raises(ValueError, match=re.escape(
            f"assistant_mtp=true drafts with the checkpoint's own multi-token-prediction modules, and "
            f"ckpt={str(without)!r} has none")):
        main([f"ckpt={without}", "prompt=the cat", "assistant_mtp=true"], stdout=io.StringIO())


def test_chat_replies_to_the_user_message_under_the_template(tmp_path):
    """chat=true: the prompt is the user's message (after system=) under the tokenizer's chat template
    (zoo's default for a char tokenizer); the reply equals model.generate on chat_ids, and a messages_file
    holding the same conversation gives the same reply."""
    path, model, tok = _checkpoint(tmp_path, "decoder")
    out = io.StringIO()
    main([f"ckpt={path}", "chat=true", "system=be brief", "prompt=the cat", "max_new_tokens=5"], stdout=out)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the cat"}]
    ids = tok.chat_ids(messages)
    assert ids[0] == tok.bos_id and ids[-len("assistant\n") - 1] == tok.bos_id
    expected = model.generate([ids], max_new_tokens=5, eos_token_id=tok.eos_id)[0, len(ids):]
    assert out.getvalue().splitlines() == [">>> the cat", tok.decode(expected)]
    conversation = tmp_path / "chat.json"
    conversation.write_text(json.dumps(messages), encoding="utf-8")
    again = io.StringIO()
    main([f"ckpt={path}", "chat=true", f"messages_file={conversation}", "max_new_tokens=5"], stdout=again)
    assert again.getvalue() == out.getvalue()


def test_chat_continues_the_final_message(tmp_path):
    """continue_final_message=true: messages_file's last message (a reply begun) is continued, the prompt
    ending inside it (chat_ids with continue_final_message); it needs chat=true and messages_file."""
    path, model, tok = _checkpoint(tmp_path, "decoder")
    messages = [{"role": "user", "content": "the cat"}, {"role": "assistant", "content": "the"}]
    conversation = tmp_path / "chat.json"
    conversation.write_text(json.dumps(messages), encoding="utf-8")
    out = io.StringIO()
    main([f"ckpt={path}", "chat=true", f"messages_file={conversation}", "continue_final_message=true",
          "max_new_tokens=5"], stdout=out)
    ids = tok.chat_ids(messages, continue_final_message=True)
    assert ids == tok.encode_chat("<bos>user\nthe cat<eos>\n<bos>assistant\nthe")  # no <eos> after "the"
    expected = model.generate([ids], max_new_tokens=5, eos_token_id=tok.eos_id)[0, len(ids):]
    assert out.getvalue().splitlines()[-1] == tok.decode(expected)
    for given in (["chat=true", "prompt=hi"], ["prompt=hi"]):
        with pytest.raises(ValueError, match="continue_final_message=true continues the last message"):
            parse_overrides([f"ckpt={path}", *given, "continue_final_message=true"])


def test_chat_errors_are_named(tmp_path):
    """A chat key without chat=true, bad messages (not a list, a role not allowed), an encoder-decoder, and a
    Hugging Face tokenizer folder without a template are each one error."""
    path, _, tok = _checkpoint(tmp_path, "decoder")
    with pytest.raises(ValueError, match="system=... is for chat; add chat=true"):
        parse_overrides([f"ckpt={path}", "prompt=a", "system=hi"])
    bad = tmp_path / "bad.json"
    wizard = r"\[0\].role must be one of system, user, assistant, tool, got 'wizard'"
    for content, match in [('{"role": "user", "content": "hi"}', "must be a non-empty list"),
                           ('[{"role": "wizard", "content": "hi"}]', wizard)]:
        bad.write_text(content, encoding="utf-8")
        with pytest.raises(ValueError, match=rf"messages_file='{bad}'.*{match}"):
            main([f"ckpt={path}", "chat=true", f"messages_file={bad}"])
    seq2seq, _, _ = _checkpoint(tmp_path, "encoder_decoder")
    with pytest.raises(ValueError, match="chat=true needs a decoder; this is a model.arch='encoder_decoder'"):
        main([f"ckpt={seq2seq}", "chat=true", "src=hi"])
    plain = load_hf_tokenizer(tok.save_hf(tmp_path / "hf"))  # a folder whose config has no chat_template
    no_template, _, _ = _checkpoint(tmp_path / "plain", "decoder", tok=plain)
    with pytest.raises(ValueError, match="this hf tokenizer has no chat template"):
        main([f"ckpt={no_template}", "chat=true", "interactive=true"], stdin=io.StringIO("hi\n"))
