"""serve.py's options: checked against the schema before anything is opened (one clear error each); a
checkpoint (ckpt=) and a Hugging Face folder (hf=) both open to a served model; non-LM models are refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
from tests.serving.conftest import tiny
from zoo.checkpoint import atomic_torch_save, zoo_section
from zoo.serving.cli import ServeConfig, open_served, parse_overrides, served_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("argv", "message"), [
    (["ckpt=a.ckpt", "prot=1"], "Unknown key 'prot'. Did you mean 'port'?"),
    (["ckpt"], "Arguments are key=value, got 'ckpt'"),
    ([], "Give one of ckpt=PATH"),
    (["ckpt=a.ckpt", "hf=folder"], "Give one of ckpt=PATH"),
    (["ckpt=a.ckpt", "port=-1"], "port must be an integer >= 0, got -1"),
    (["ckpt=a.ckpt", "max_batch=0"], "max_batch must be an integer >= 1, got 0"),
    (["ckpt=a.ckpt", "timeout=0"], "timeout must be a number of seconds > 0"),
    (["ckpt=a.ckpt", "port=eighty"], "port='eighty' is not an integer."),
    (["ckpt=a.ckpt", "device=tpu"], "device='tpu' is not available"),
    (["ckpt=a.ckpt", "host=0.0.0.0"], "host=0.0.0.0 accepts connections from other machines, and no API key"),
    (["ckpt=a.ckpt", "host=example.org"], "give api_key=<key> (or set ZOO_API_KEY)"),
    (["ckpt=a.ckpt", "api_key="], "api_key must not be empty"),
    (["ckpt=a.ckpt", "api_key= s3cret"], "api_key must be printable ASCII without leading or trailing"),
    (["ckpt=a.ckpt", "api_key=clé"], "api_key must be printable ASCII"),  # no header could carry it: 401s
    (["ckpt=a.ckpt", "max_body_mb=0"], "max_body_mb must be a number of MiB > 0, got 0"),
    (["ckpt=a.ckpt", "prepare_timeout=-1"], "prepare_timeout must be a number of seconds > 0"),
    (["ckpt=a.ckpt", "prepare_workers=0"], "prepare_workers must be an integer >= 1, got 0"),
    (["ckpt=a.ckpt", "max_body_mb=inf"], "max_body_mb must be a finite number, got inf"),  # int(inf): 500s
    (["ckpt=a.ckpt", "prepare_timeout=1e400"], "prepare_timeout must be a finite number, got inf"),
])
def test_bad_options_fail_before_anything_is_opened(argv, message):
    with pytest.raises(ValueError, match=None) as err:
        parse_overrides(argv)
    assert message in str(err.value)


@pytest.mark.parametrize(("argv", "env", "key"), [
    (["host=0.0.0.0", "api_key=s3cret"], None, "s3cret"),
    (["host=0.0.0.0"], "from-env", "from-env"),
    (["host=0.0.0.0", "api_key=mine"], "from-env", "mine"),
    (["host=0.0.0.0", "insecure_no_key=true"], None, None),
    (["host=::1"], None, None),
    (["host=localhost"], None, None),
])
def test_api_key_from_the_command_line_or_the_environment(monkeypatch, argv, env, key):
    """A non-loopback host needs a key (api_key=, else $ZOO_API_KEY) or an explicit insecure_no_key=true."""
    if env is None:
        monkeypatch.delenv("ZOO_API_KEY", raising=False)
    else:
        monkeypatch.setenv("ZOO_API_KEY", env)
    assert parse_overrides(["ckpt=a.ckpt", *argv]).api_key == key


def test_defaults(monkeypatch):
    monkeypatch.delenv("ZOO_API_KEY", raising=False)
    cfg = parse_overrides(["ckpt=x.ckpt"])
    assert cfg == ServeConfig(ckpt="x.ckpt") and (cfg.host, cfg.port) == ("127.0.0.1", 8000)


def test_checkpoint_and_hf_folder_open_to_the_same_served_model(tmp_path, monkeypatch):
    model, tok = tiny()
    ckpt = tmp_path / "tiny.ckpt"
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": zoo_section(model.config, "lm", tok)}, ckpt)
    hf = tmp_path / "hf"
    zoo.save_pretrained(model, hf)
    tok.save_hf(hf)
    ids = torch.tensor([tok.encode("the cat")])
    loads, load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda f, *a, **k: loads.append(str(f)) or load(f, *a, **k))
    for argv, name in (([f"ckpt={ckpt}"], "tiny.ckpt"), ([f"hf={hf}", "model_name=mine"], "mine")):
        served = open_served(parse_overrides(argv))
        try:
            assert served.name == name and served.context == model.config.max_seq_len
            torch.testing.assert_close(served.model(ids).logits, model(ids).logits)
            assert served.tokenizer.encode("the cat") == tok.encode("the cat")
        finally:
            served.close()
    assert loads == [str(ckpt)]  # the checkpoint is read once (zoo.apps.open_model)


def test_only_language_models_are_served():
    seq2seq = zoo.build(dict(arch="encoder_decoder", vocab_size=20, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match="serves decoder language models"):
        served_model(seq2seq, None, "x")


def test_longrope_models_are_served_up_to_their_original_length():
    """Past positional.scaling.original_max_len LongRoPE switches factors and cached keys go stale; the engine
    does not re-prefill there, so the served context stops at that length (a longer request gets OpenAI's
    400)."""
    longrope = {"name": "longrope", "original_max_len": 8, "short_factor": [1.0, 2.0, 3.0, 4.0],
                "long_factor": [2.0, 3.0, 4.0, 5.0]}
    model = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=24,
                      positional={"scaling": longrope}, max_seq_len=64)
    plain = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=24,
                      max_seq_len=64)
    served = [served_model(m, None, "x") for m in (model, plain)]
    try:
        assert [s.context for s in served] == [8, 64]
    finally:
        for s in served:
            s.close()


def test_help_needs_no_server_packages():
    out = subprocess.run([sys.executable, str(ROOT / "serve.py"), "--help"], capture_output=True, text=True,
                         timeout=60, check=True)
    assert "/v1/chat/completions" in out.stdout


def test_a_hugging_face_folder_without_a_tokenizer_is_one_error(tmp_path):
    """serve.py prints ValueErrors as one line: a folder with weights but no tokenizer.json names hf= and
    what is missing (it was a FileNotFoundError traceback)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2, n_positions=16)
    GPT2LMHeadModel(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"hf={tmp_path}: .*has no tokenizer.json"):
        open_served(ServeConfig(hf=str(tmp_path)))
