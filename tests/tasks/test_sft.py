"""task=sft end to end on the data side: data=chat read through build_data into packed windows whose targets
are the next tokens where the mask trains (-100 elsewhere and across rows), the packed loss equal to the rows'
losses computed alone (documents kept apart), long rows cut and counted or refused by data.truncate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.tokenizers import test_chat
from tests.tokenizers.chat_templates import FAMILIES
from tests.tokenizers.test_chat import write_folder
from zoo.config import ModelConfig
from zoo.data.chat_masks import encode_row
from zoo.data.chat_rows import read_row
from zoo.models import build_model
from zoo.tasks import build_data, get_task
from zoo.tokenizers import load_hf_tokenizer
from zoo.utils import IGNORE_INDEX

ROWS = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello there!"}]},
    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
                  {"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"}]},
    {"prompt": [{"role": "user", "content": "Capital of France?"}],
     "completion": [{"role": "assistant", "content": "Paris."}]},
    {"messages": [{"role": "user", "content": "Joke?"}, {"role": "assistant", "content": "No jokes."}]},
    {"text": "Plain text row."},
] * 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    qwen = next(f for f in FAMILIES if f.name == "qwen2.5")
    return write_folder(test_chat.base_tokenizer.__wrapped__(), qwen, tmp_path_factory.mktemp("qwen") / "tok")


def chat_data(tmp_path: Path, folder: Path, rows=ROWS, max_seq_len: int = 64, **data):
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return build_data({"name": "chat", "path": str(path), **data}, {"name": "hf", "path": str(folder)},
                      task="sft", max_seq_len=max_seq_len, batch_size=2, cache_dir=tmp_path / "cache")


def test_windows_carry_the_mask_shifted_and_keep_rows_apart(tmp_path: Path, folder: Path) -> None:
    tok, dm = chat_data(tmp_path, folder)
    data = dm.datasets["train"]
    rows = [encode_row(tok, read_row(r, "x"), "auto") for r in ROWS]
    by_ids = {tuple(ids): mask for ids, mask in rows}
    seen = 0
    for w in range(len(data)):
        ex = data[w]
        docs, inputs, targets = ex["document_ids"], ex["input_ids"], ex["targets"]
        assert len(inputs) <= 64 and docs.tolist() == sorted(docs.tolist())
        for d in docs.unique():
            at = docs == d
            ids = inputs[at].tolist()
            full = next(k for k in by_ids if list(k[:-1]) == ids)  # the row's ids without its last
            mask = by_ids[full]
            want = [t if m else IGNORE_INDEX for t, m in zip(full[1:], mask[1:], strict=True)]
            assert targets[at].tolist() == want
            seen += 1
    assert seen == len(dm.rows["train"][0]) and len(data) < seen  # packed: fewer windows than rows
    assert data.trained_tokens == sum(int((data[w]["targets"] != IGNORE_INDEX).sum())
                                      for w in range(len(data)))


def test_packed_loss_equals_the_rows_alone(tmp_path: Path, folder: Path) -> None:
    tok, dm = chat_data(tmp_path, folder)
    task = get_task("sft")
    torch.manual_seed(0)
    model = build_model(task.model_config(ModelConfig(arch="decoder", d_model=32, n_layers=2, n_heads=2,
                                                      max_seq_len=64, dropout=0.0, positional="rope"), tok))
    model.eval()
    batch = next(iter(dm.val_dataloader()))
    with torch.no_grad():
        packed = task.loss(model(**task.model_inputs(batch)), batch) * task.counted_labels(batch)
        alone = 0.0
        for row in range(batch["input_ids"].shape[0]):
            docs = batch["document_ids"][row]
            for d in docs[batch["attention_mask"][row].bool()].unique():
                at = (docs == d) & batch["attention_mask"][row].bool()
                one = {key: batch[key][row][at][None] for key in ("input_ids", "targets")}
                if (one["targets"] != IGNORE_INDEX).any():
                    alone += task.loss(model(input_ids=one["input_ids"]), one) * task.counted_labels(one)
    torch.testing.assert_close(packed, alone, atol=1e-4, rtol=1e-5)


def test_long_rows_are_cut_and_counted_or_refused(tmp_path: Path, folder: Path) -> None:
    long = {"messages": [{"role": "user", "content": "Hi " * 200}, {"role": "assistant", "content": "Hey"}]}
    _, dm = chat_data(tmp_path, folder, rows=[*ROWS, long, long])
    assert sum(dm.overlong.values()) == 2
    assert all(len(d[w]["input_ids"]) <= 64 for d in dm.datasets.values() for w in range(len(d)))
    with pytest.raises(ValueError, match=r"chats.jsonl: line 1[67] has \d+ tokens, more than "
                                         r"model.max_seq_len \+ 1 = 65 .*data.truncate=true"):
        chat_data(tmp_path, folder, rows=[*ROWS, long, long], truncate=False)


def test_sft_trains_only_on_assistant_tokens(tmp_path: Path, folder: Path) -> None:
    tok, dm = chat_data(tmp_path, folder)
    batch = next(iter(dm.train_dataloader()))
    trained = batch["targets"][batch["targets"] != IGNORE_INDEX].tolist()
    text = tok.decode(trained, skip_special_tokens=False)
    assert "Hi" not in text and "Be brief" not in text and "user" not in text


def test_a_datasets_folder_reads_as_its_jsonl(tmp_path: Path, folder: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = [r for r in ROWS if "messages" in r]  # one format per column set, as a datasets table holds them
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    tokenizer = {"name": "hf", "path": str(folder)}
    _, saved = build_data({"name": "chat", "path": str(tmp_path / "saved")}, tokenizer, task="sft",
                          max_seq_len=64, batch_size=2, cache_dir=tmp_path / "cache")
    _, jsonl = chat_data(tmp_path, folder, rows=rows)
    for split in ("train", "val"):
        for ours, theirs in zip(saved.rows[split], jsonl.rows[split], strict=True):
            assert np.array_equal(getattr(ours, "ids", ours), getattr(theirs, "ids", theirs))
    bad = [*rows, {"messages": [{"role": "user", "content": "no reply"}]}]
    datasets.Dataset.from_list(bad).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match=f"bad:{len(bad)}: a conversation without an assistant turn"):
        build_data({"name": "chat", "path": str(tmp_path / "bad")}, tokenizer, task="sft", max_seq_len=64,
                   batch_size=2, cache_dir=tmp_path / "cache")


@pytest.mark.e2e  # a train.py subprocess: ~15 s
def test_train_py_sft_from_an_hf_folder(tmp_path: Path, folder: Path) -> None:
    """The issue's command line: task=sft init_from=<HF folder> data=chat data.path=...; validation logs the
    loss over trained tokens and token accuracy, training its token accuracy and trained tokens per step, and
    the samples are replies to validation conversations rendered through the template."""
    import csv
    import subprocess
    import sys

    from zoo.pretrained.api import save_pretrained

    tok = load_hf_tokenizer(folder)
    cfg = ModelConfig(arch="decoder", d_model=32, n_layers=1, n_heads=2, d_ff=64, activation="swiglu",
                      norm="rmsnorm", positional="rope", bias=False, max_seq_len=64, tie_embeddings=False)
    save_pretrained(build_model(get_task("sft").model_config(cfg, tok)), tmp_path / "hf", model_type="llama")
    tok.save_hf(tmp_path / "hf")
    rows = tmp_path / "chats.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "train.py"), "task=sft", f"init_from={tmp_path / 'hf'}", "data=chat",
         f"data.path={rows}", "trainer.max_steps=2", "eval_every=2", "batch_size=2", "logger=csv",
         "trainer.log_every_n_steps=1", "callbacks.samples.max_new_tokens=4", "callbacks.samples.num_shown=1",
         f"paths.output_dir={tmp_path / 'run'}", f"paths.runs_dir={tmp_path / 'runs'}",
         f"paths.cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "<|im_start|>assistant" in done.stdout and "reference:" in done.stdout  # a rendered chat prompt
    with open(tmp_path / "run" / "csv" / "metrics.csv", encoding="utf-8") as f:
        logged = {key for row in csv.DictReader(f) for key, value in row.items() if value}
    assert {"train/loss", "train/token_accuracy", "train/trained_tokens", "val/loss",
            "val/token_accuracy"} <= logged
