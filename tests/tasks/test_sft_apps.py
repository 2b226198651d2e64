"""The apps on a task=sft checkpoint (issue 38): a tiny Llama with Qwen2.5's tokenizer and chat template (a
Hugging Face folder) trained two steps by `task=sft init_from=<folder> data=chat`; its checkpoint keeps
that tokenizer and template, so `generate.py chat=true`, serve.py's /v1/chat/completions and `python -m
zoo.lm_eval --apply_chat_template` render a conversation as transformers renders it with the folder's own
tokenizer (zoo's default template or a retrained tokenizer would give other ids), and reply with what
`model.generate` gives on those ids."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import zoo
from tests.tasks.test_dpo import TINY
from tests.tokenizers import test_chat
from tests.tokenizers.chat_templates import FAMILIES
from tests.tokenizers.test_chat import write_folder
from zoo.apps import open_model
from zoo.models import build_model
from zoo.tasks import get_task
from zoo.tokenizers import load_hf_tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.e2e  # a 2-step SFT run, shared by the module's tests

CONF = Path(__file__).resolve().parents[2] / "conf"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3?"}]


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> tuple[Path, Path]:
    """(the SFT run's last.ckpt, the Hugging Face folder it started from)."""
    from zoo.training.hydra_configs import register_train_configs
    from zoo.training.run import train

    register_train_configs()
    tmp = tmp_path_factory.mktemp("sft_apps")
    qwen = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok = load_hf_tokenizer(write_folder(test_chat.base_tokenizer.__wrapped__(), qwen, tmp / "tok"))
    zoo.save_pretrained(build_model(get_task("sft").model_config(TINY, tok)), tmp / "hf", model_type="llama")
    tok.save_hf(tmp / "hf")
    rows = [{"messages": [{"role": "user", "content": f"Add {a} and {b}?"},
                          {"role": "assistant", "content": f"{a + b}."}]} for a in range(6) for b in range(4)]
    (tmp / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[
            "task=sft", f"init_from={tmp / 'hf'}", "data=chat", f"data.path={tmp / 'chats.jsonl'}",
            "batch_size=4", "logger=csv", "trainer.accelerator=cpu", "trainer.max_steps=2", "eval_every=2",
            "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false", "callbacks.samples=null",
            f"paths.output_dir={tmp / 'run'}", f"paths.runs_dir={tmp}", f"paths.cache_dir={tmp / 'c'}"])
    return train(cfg).last_checkpoint, tmp / "hf"


def transformers_chat(folder: Path, messages: list[dict]) -> tuple[str, list[int]]:
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return text, hf(text, add_special_tokens=False)["input_ids"]


def greedy(model, tok, ids: list[int], n: int) -> list[int]:
    """What model.generate continues `ids` with (eos and after it dropped)."""
    new = model.generate([ids], max_new_tokens=n, eos_token_id=tok.eos_id)[0, len(ids):].tolist()
    return new[: new.index(tok.eos_id)] if tok.eos_id in new else new


def test_the_checkpoint_keeps_the_folders_tokenizer_and_template(sft_run):
    ckpt, folder = sft_run
    _, tok, task = open_model(ckpt)
    assert task == "sft"
    assert tok.chat_template == transformers.AutoTokenizer.from_pretrained(str(folder)).chat_template
    text, ids = transformers_chat(folder, MESSAGES)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert tok.chat_ids(MESSAGES) == ids


def test_generate_chat_true_replies_under_the_folders_template(sft_run):
    from zoo.generate_cli import main

    ckpt, folder = sft_run
    model, tok, _ = open_model(ckpt)
    out = io.StringIO()
    main([f"ckpt={ckpt}", "chat=true", "system=Be brief.", "prompt=Add 2 and 3?", "max_new_tokens=6"],
         stdout=out)
    _, ids = transformers_chat(folder, MESSAGES)
    reply = model.generate([ids], max_new_tokens=6, eos_token_id=tok.eos_id)[0, len(ids):]
    assert out.getvalue() == f">>> Add 2 and 3?\n{tok.decode(reply)}\n"


def test_serve_chat_completions_reply_under_the_folders_template(sft_run):
    pytest.importorskip("fastapi")
    import httpx

    from tests.serving.conftest import serving

    ckpt, folder = sft_run
    model, tok, _ = open_model(ckpt)  # what serve.py ckpt=... opens
    _, ids = transformers_chat(folder, MESSAGES)
    with serving(model, tok) as (url, _):
        reply = httpx.post(f"{url}/chat/completions", timeout=60, json={
            "model": "tiny-zoo", "messages": MESSAGES, "max_tokens": 6, "temperature": 0}).json()
    assert reply["usage"]["prompt_tokens"] == len(ids)
    assert reply["choices"][0]["message"]["content"] == tok.decode(greedy(model, tok, ids, 6))


def test_lm_eval_apply_chat_template_renders_as_transformers(sft_run):
    pytest.importorskip("lm_eval")
    from zoo.lm_eval.model import ZooLM

    ckpt, folder = sft_run
    lm = ZooLM(ckpt=str(ckpt), device="cpu")
    assert lm.chat_template(True) == lm.tokenizer.chat_template
    text, ids = transformers_chat(folder, MESSAGES)
    assert lm.apply_chat_template(MESSAGES) == text
    assert lm.tok_encode(text) == ids
