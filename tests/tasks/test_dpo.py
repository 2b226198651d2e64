"""task=dpo wired into train.py: the issue's command line trains a tiny Llama from an HF folder on preference
pairs and logs trl's reward metrics on train and validation, with the loss at step 0 ln 2 (policy ==
reference); the reference of a LoRA run is the base model (adapters off, no copy), else a frozen copy; bad
dpo.* keys and data that is not preference pairs are one error each."""

from __future__ import annotations

import copy
import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.tokenizers import test_chat
from tests.tokenizers.chat_templates import FAMILIES
from tests.tokenizers.test_chat import write_folder
from zoo.apps import ConfigError
from zoo.config import ModelConfig
from zoo.data.cache import RaggedIds
from zoo.data.preference import EncodedPair, collate_pairs
from zoo.data.preference_batches import PreferencePairs
from zoo.finetune.lora import LoRALinear, add_lora
from zoo.models import build_model
from zoo.tasks import build_data, get_task
from zoo.tasks.preference import completion_logps
from zoo.tokenizers import load_hf_tokenizer
from zoo.training.plan import prepare

from .conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]
TINY = ModelConfig(arch="decoder", d_model=32, n_layers=1, n_heads=2, d_ff=64, activation="swiglu",
                   norm="rmsnorm", positional="rope", bias=False, max_seq_len=64, tie_embeddings=False,
                   vocab_size=97, dropout=0.0)
PAIRS = [EncodedPair([5, 6, 7], [8, 9, 1], [10, 1]), EncodedPair([11, 12], [13, 1], [14, 15, 16, 1])]


def write_pairs(path: Path) -> Path:
    places = ["Paris", "Rome", "Oslo", "Lima", "Seoul"]
    rows = [{"prompt": f"Where is {name}? ", "chosen": f"{name} is in {place}.",
             "rejected": f"{name} is in {places[(i + 1) % 5]}."}
            for name in ("Alice", "Bob", "Carol", "Dan") for i, place in enumerate(places)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    qwen = next(f for f in FAMILIES if f.name == "qwen2.5")
    return write_folder(test_chat.base_tokenizer.__wrapped__(), qwen, tmp_path_factory.mktemp("qwen") / "tok")


def policy_and_reference(model):
    """(policy, reference) summed completion log-probs of PAIRS under task=dpo bound to `model`."""
    run = get_task("dpo").for_model(model, {})
    batch = collate_pairs(PAIRS, pad_id=0)
    pairs = run.pairs(model(**run.model_inputs(batch)), batch)
    return torch.cat([pairs.chosen, pairs.rejected]), torch.cat([pairs.ref_chosen, pairs.ref_rejected])


def test_lora_reference_is_the_base_model_without_a_copy():
    """With LoRA adapters (their B made nonzero, so the policy differs), the reference log-probs equal the
    base model's, the run holds no second model, and the adapters are back on afterwards."""
    torch.manual_seed(0)
    model = build_model(TINY)
    base = copy.deepcopy(model).eval()
    add_lora(model, rank=2, alpha=4.0, dropout=0.0, targets=["self_attn.qkv", "self_attn.o"])
    for layer in model.modules():
        if isinstance(layer, LoRALinear):
            torch.nn.init.normal_(layer.lora_B, std=0.5)
    model.train()
    assert get_task("dpo").for_model(model, {}).reference is None
    policy, reference = policy_and_reference(model)
    batch = collate_pairs(PAIRS, pad_id=0)
    with torch.no_grad():
        expected = completion_logps(base(**get_task("dpo").model_inputs(batch)).logits, batch)[0]
    assert torch.allclose(reference, expected, atol=1e-6)
    assert not torch.allclose(policy, expected, atol=1e-3)  # the adapters are on again for the policy
    assert model.training


def test_full_reference_is_a_frozen_copy():
    """Without LoRA the reference is a frozen copy: it trains nothing and keeps the starting weights when the
    policy's change; at the start both score the pairs alike."""
    torch.manual_seed(0)
    model = build_model(TINY).eval()
    run = get_task("dpo").for_model(model, {})
    assert run.reference is not None and run.reference is not model
    assert not any(p.requires_grad for p in run.reference.parameters())
    batch = collate_pairs(PAIRS, pad_id=0)
    pairs = run.pairs(model(**run.model_inputs(batch)), batch)
    assert torch.allclose(pairs.chosen, pairs.ref_chosen)
    assert torch.allclose(pairs.rejected, pairs.ref_rejected)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)
    moved = run.pairs(model(**run.model_inputs(batch)), batch)
    assert torch.allclose(moved.ref_chosen, pairs.ref_chosen)
    assert not torch.allclose(moved.chosen, pairs.chosen)


@pytest.mark.parametrize(("override", "message"), [
    ("dpo.beta=0", r"dpo.beta must be a finite number > 0, got 0"),
    ("dpo.loss_type=dop", r"dpo.loss_type"),
    ("+dpo.gamma=1", r"dpo.gamma"),
])
def test_bad_dpo_keys_are_one_error(make_cfg, tmp_path, override, message):
    pairs = write_pairs(tmp_path / "p.jsonl")
    cfg = make_cfg([*TINY_MODEL, "task=dpo", "data=preference", f"data.path={pairs}", override])
    with pytest.raises(ConfigError, match=message):
        prepare(cfg)


def test_dpo_keys_are_refused_for_another_task(make_cfg):
    with pytest.raises(ConfigError, match=r"dpo\.\* applies to task=dpo only, not task=lm"):
        prepare(make_cfg([*TINY_MODEL, "task=lm", "dpo.beta=0.2"]))


def test_dpo_without_preference_data_is_one_error(make_cfg, tmp_path, folder):
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n" * 2
                    + json.dumps({"messages": [{"role": "user", "content": "yo"},
                                               {"role": "assistant", "content": "hey"}]}) + "\n",
                    encoding="utf-8")
    message = "data=chat gives chat examples, which suit task ['sft'], not task='dpo'"
    with pytest.raises(ValueError, match=re.escape(message)):
        build_data({"name": "chat", "path": str(chat)}, {"name": "hf", "path": str(folder)}, task="dpo",
                   max_seq_len=64, batch_size=2, cache_dir=tmp_path / "cache")


def test_long_pairs_are_cut_or_refused():
    """A pair longer than max_seq_len is cut at the end (data.truncate=true, counted) or refused naming it;
    a prompt that leaves no completion token is refused either way."""
    parts = tuple(RaggedIds.from_rows(rows, np.int32) for rows in (
        [[1, 2], [1, 2, 3, 4]], [[5, 6, 7, 8], [5]], [[9], [9]]))  # pair 0: 6 tokens; 1: 4 of prompt
    with pytest.raises(ValueError, match=r"train pair 0 has 6 tokens, more than model.max_seq_len=4; "
                                         "set data.truncate=true to cut it, or raise model.max_seq_len"):
        PreferencePairs(parts, 4, truncate=False, origin="pairs.jsonl", split="train")
    with pytest.raises(ValueError, match=r"train pair 1: its prompt has 4 tokens; model.max_seq_len=4 "
                                         "leaves no room for a completion"):
        PreferencePairs(parts, 4, truncate=True, origin="pairs.jsonl", split="train")
    fitted = PreferencePairs(parts, 5, truncate=True, origin="pairs.jsonl", split="train")
    assert fitted.cut == 1 and fitted[0] == EncodedPair([1, 2], [5, 6, 7], [9])
    assert fitted[1] == EncodedPair([1, 2, 3, 4], [5], [9])


@pytest.mark.e2e  # a train.py subprocess: ~15 s
def test_train_py_dpo_from_an_hf_folder(tmp_path: Path, folder: Path) -> None:
    """The issue's command line: task=dpo init_from=<HF folder> data=preference dpo.beta=0.1
    dpo.loss_type=sigmoid; the loss of the first step is ln 2 (the policy is the reference), and trl's six
    reward metrics are logged on train and validation."""
    from zoo.pretrained.api import save_pretrained

    tok = load_hf_tokenizer(folder)
    save_pretrained(build_model(get_task("dpo").model_config(TINY, tok)), tmp_path / "hf", model_type="llama")
    tok.save_hf(tmp_path / "hf")
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "task=dpo", f"init_from={tmp_path / 'hf'}",
         "data=preference", f"data.path={write_pairs(tmp_path / 'pairs.jsonl')}", "dpo.beta=0.1",
         "dpo.loss_type=sigmoid",
         "trainer.max_steps=2", "eval_every=2", "batch_size=2", "logger=csv", "trainer.log_every_n_steps=1",
         "callbacks.samples.max_new_tokens=4", "callbacks.samples.num_shown=1",
         f"paths.output_dir={tmp_path / 'run'}", f"paths.runs_dir={tmp_path / 'runs'}",
         f"paths.cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "run" / "csv" / "metrics.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    logged = {key for row in rows for key, value in row.items() if value}
    names = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
             "logps/rejected")
    assert {"train/loss", "val/loss", *(f"train/{n}" for n in names), *(f"val/{n}" for n in names)} <= logged
    first = next(row for row in rows if row.get("train/loss"))
    assert int(first["step"]) == 0
    assert float(first["train/loss"]) == pytest.approx(math.log(2), abs=1e-6)
    assert float(first["train/rewards/margins"]) == pytest.approx(0.0, abs=1e-6)

