"""evaluate.py's causal-LM numbers against a hand computation with `transformers`: a tiny GPT-2 built
locally from a config, loaded into zoo with zoo.from_pretrained and saved as a training checkpoint; the
reference runs the Hugging Face model itself over the same windows and sums log-softmax by hand."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import zoo
from zoo.evaluation.run import evaluate
from zoo.tasks import build_data
from zoo.tokenizers import build_tokenizer

from .conftest import write_checkpoint

WINDOW = 32
LINES = [f"line {i}: the quick brown fox {'jumps' if i % 3 else 'naps'} over {i * 7 % 11} dogs\n"
         for i in range(120)]


@pytest.fixture
def gpt2_checkpoint(tmp_path):
    text = "".join(LINES)  # ASCII: one character = one byte
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    tokenizer = build_tokenizer({"name": "char"}, [text])
    hf = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=tokenizer.vocab_size,
                                    n_positions=WINDOW, bos_token_id=tokenizer.bos_id,
                                    eos_token_id=tokenizer.eos_id))
    torch.manual_seed(0)
    with torch.no_grad():  # a sharper model than the init: logits that differ a lot between tokens
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    hf.eval().save_pretrained(tmp_path / "hf")
    model = zoo.from_pretrained(tmp_path / "hf")
    ckpt = write_checkpoint(tmp_path / "gpt2.ckpt", model, "lm", tokenizer)
    return hf, tokenizer, ckpt, corpus


def test_perplexity_and_bits_per_byte_match_transformers_by_hand(gpt2_checkpoint, make_eval_cfg, tmp_path):
    hf, tokenizer, ckpt, corpus = gpt2_checkpoint
    cfg = make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}", "batch_size=3",
                         f"output={tmp_path / 'out' / 'metrics.json'}"])
    report = evaluate(cfg)

    # the same windows, read through the data pipeline with the same tokenizer (not what is under test)
    tokenizer.save(tmp_path / "tok")
    _, dm = build_data({"name": "text", "files": str(corpus)},
                       {"name": "file", "path": str(tmp_path / "tok")},
                       task="lm", max_seq_len=WINDOW, batch_size=3, cache_dir=tmp_path / "c2")
    dm.setup("fit")
    windows = [dm.datasets["val"][k] for k in range(len(dm.datasets["val"]))]
    nll, tokens, text_bytes = 0.0, 0, 0
    with torch.no_grad():
        for w in windows:
            logp = torch.log_softmax(hf(w["input_ids"][None]).logits[0].double(), -1)  # (T, V)
            nll -= float(logp.gather(-1, w["targets"][:, None]).sum())
            tokens += len(w["targets"])
            text_bytes += int((w["targets"] >= len(tokenizer.special_ids)).sum())  # a character is a byte
    assert len(windows) > 1 and tokens == report.metrics["tokens"]
    assert report.split == "val" and report.task == "lm"
    assert report.metrics["perplexity"] == pytest.approx(math.exp(nll / tokens), rel=1e-4)
    assert report.metrics["loss"] == pytest.approx(nll / tokens, rel=1e-4)
    assert report.metrics["bytes"] == text_bytes
    assert report.metrics["bits_per_byte"] == pytest.approx(nll / math.log(2) / text_bytes, rel=1e-4)
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert written["metrics"]["perplexity"] == pytest.approx(report.metrics["perplexity"])
    assert written["task"] == "lm" and written["split"] == "val"


def test_max_examples_scores_the_first_windows_only(gpt2_checkpoint, make_eval_cfg):
    _, _, ckpt, corpus = gpt2_checkpoint
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}", "max_examples=2",
                                     "batch_size=3", "output=null"]))
    assert report.metrics["tokens"] == 2 * WINDOW


# A validation split known by hand: the file is ASCII training lines and then one long last line (more than
# val_fraction=0.1 of the file, no newline inside), so data=text's validation text is exactly that line. Its
# characters include some the checkpoint's tokenizer never saw (<unk>: ï, é, €, 😀).
VAL_TEXT = "naïve café costs €5 😀 and the fox naps; " * 26


@pytest.fixture(params=[992, 1000], ids=["no_tail", "tail_of_8"])
def unk_checkpoint(tmp_path, request):
    """992 characters + <eos>: 31 whole windows of targets; 1000: 8 targets after the last whole window."""
    val_line = VAL_TEXT[:request.param]
    train_text = "".join(LINES)  # ASCII: ï, é, € and 😀 stay unknown to the char tokenizer
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(train_text + val_line, encoding="utf-8")
    assert len(val_line.encode()) > 0.1 * corpus.stat().st_size and "\n" not in val_line
    tokenizer = build_tokenizer({"name": "char"}, [train_text])
    hf = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=tokenizer.vocab_size,
                                    n_positions=WINDOW, bos_token_id=tokenizer.bos_id,
                                    eos_token_id=tokenizer.eos_id))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    hf.eval().save_pretrained(tmp_path / "hf")
    ckpt = write_checkpoint(tmp_path / "gpt2.ckpt", zoo.from_pretrained(tmp_path / "hf"), "lm", tokenizer)
    return hf, tokenizer, ckpt, corpus, val_line


def test_every_validation_token_after_the_first_is_scored_once_tail_included(unk_checkpoint, make_eval_cfg):
    """The whole validation stream (the line's characters, then <eos>) scored by hand: windows of WINDOW
    inputs every WINDOW tokens, the last one short, so each of the N - 1 targets counts once (before: the
    targets after the last whole window were never scored). Bits per byte divides by the UTF-8 bytes of the
    scored characters, <unk> ones included (ï, é 2 bytes, € 3, 😀 4; <eos> none), not by what <unk> decodes to
    (before: nothing, so bits per byte came out several times too high)."""
    hf, tokenizer, ckpt, corpus, val_line = unk_checkpoint
    ids = [tokenizer.hf.token_to_id(ch) for ch in val_line]  # the char tokenizer's ids, None where unseen
    ids = [tokenizer.unk_id if i is None else i for i in ids] + [tokenizer.eos_id]
    assert tokenizer.unk_id in ids
    nll = 0.0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, WINDOW):
            window = torch.tensor(ids[start:start + WINDOW + 1])
            logp = torch.log_softmax(hf(window[None, :-1]).logits[0].double(), -1)  # (T, V)
            nll -= float(logp.gather(-1, window[1:, None]).sum())
    scored_bytes = len(val_line[1:].encode("utf-8"))  # every character but the first; <eos> spells nothing
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}", "batch_size=4",
                                     "output=null"]))
    assert report.metrics["tokens"] == len(ids) - 1 == len(val_line)
    assert report.metrics["loss"] == pytest.approx(nll / (len(ids) - 1), rel=1e-4)
    assert report.metrics["bytes"] == scored_bytes
    assert report.metrics["bits_per_byte"] == pytest.approx(nll / math.log(2) / scored_bytes, rel=1e-4)
    assert report.metrics["windows"] == -(-(len(ids) - 1) // WINDOW)
