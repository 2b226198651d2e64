"""A tiny zoo Llama with a BPE tokenizer trained on the local task data, saved as a training checkpoint and
exported to a Hugging Face folder with zoo.export (what lm-eval's own `hf` model reads), and the setting
that keeps lm-eval and `datasets` off the network and out of the home cache."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

import zoo
from tests.evaluation.conftest import write_checkpoint
from zoo.tokenizers import build_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "tests" / "fixtures" / "lm_eval"  # task YAMLs; their data_files are relative to ROOT
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


class Pretrained(NamedTuple):
    ckpt: Path  # a zoo training checkpoint
    hf: Path  # its zoo.export(format="hf") folder


def training_text() -> list[str]:
    """What the model learns: the answers to half of the multiple-choice questions (so its accuracy on the
    task is neither 0 nor 1), the generation prompts with their answers and a newline, the documents."""
    def rows(name: str) -> list[dict]:
        return [json.loads(line) for line in (TASKS / name).read_text().splitlines()]

    answered = [f"Question: {d['question']}\nAnswer: {d['choices'][d['label']]}\n"
                for d in rows("choices.jsonl")[::2]]
    return (answered + [f"{d['prompt']} {d['answer']}\n" for d in rows("until.jsonl")]
            + [d["text"] + "\n" for d in rows("text.jsonl")])


# A chat template with zoo's special tokens (so the export writes it) that trims each message, as Llama 3's
# and Gemma's do, and refuses a system message, as Gemma's does (lm-eval's hf model then drops it)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{{ m['role'] + ':\n' + m['content'] | trim + eos_token + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant:\n' }}{% endif %}"
)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """(model, tokenizer): a tiny Llama trained for a few seconds on the task data."""
    texts = [line for f in sorted(TASKS.glob("*.jsonl")) for line in f.read_text().splitlines()]
    tokenizer = build_tokenizer({"name": "bpe", "vocab_size": 400}, texts)  # merges across word boundaries
    torch.manual_seed(0)
    model = zoo.build("llama_small", vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=4,
                      n_kv_heads=2, d_ff=64, max_seq_len=32)  # 32: long texts and contexts are windowed / cut
    stream = torch.tensor([i for doc in training_text() for i in [*tokenizer.encode(doc), tokenizer.eos_id]])
    windows = stream.unfold(0, 32, 8)  # (N, 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(60):  # a few seconds: greedy answers end with the newline a stop string cuts at
        optimizer.zero_grad()
        model(windows, labels=windows).loss.backward()
        optimizer.step()
    return model.eval(), tokenizer


@pytest.fixture(scope="session")
def pretrained(trained, tmp_path_factory) -> Pretrained:
    out = tmp_path_factory.mktemp("lm_eval_model")
    ckpt = write_checkpoint(out / "model.ckpt", trained[0], "lm", trained[1])
    return Pretrained(ckpt, zoo.export(ckpt, out / "hf", format="hf"))


@pytest.fixture(scope="session")
def chat_pretrained(trained, tmp_path_factory) -> Pretrained:
    """The same weights with CHAT_TEMPLATE as the tokenizer's chat template (written into the export's
    tokenizer_config.json, which lm-eval's hf model renders with transformers)."""
    out = tmp_path_factory.mktemp("lm_eval_chat_model")
    model, tokenizer = trained
    tokenizer = copy.copy(tokenizer)
    tokenizer.chat_template = CHAT_TEMPLATE
    ckpt = write_checkpoint(out / "model.ckpt", model, "lm", tokenizer)
    return Pretrained(ckpt, zoo.export(ckpt, out / "hf", format="hf"))


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No download, and the datasets cache in tmp_path, for this process and its children."""
    import datasets.config

    for key, value in {**OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "datasets")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.chdir(ROOT)  # the tasks' data_files are relative to the repository root
