"""Bad input to evaluate.py gets one clear error before any model runs: a file that is not a zoo
checkpoint, data whose kind does not suit the checkpoint's task, a split the data lacks, unknown keys and
bad generation options; the script turns each into one `error:` line and exit code 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
from zoo.apps import ConfigError
from zoo.evaluation.run import evaluate, report_table
from zoo.tokenizers import build_tokenizer

from .conftest import write_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TEXT = "".join(f"row {i} of some text\n" for i in range(150))


@pytest.fixture
def lm_checkpoint(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    tok = build_tokenizer({"name": "char"}, [TEXT])
    model = zoo.build("gpt_nano", vocab_size=tok.vocab_size, max_seq_len=16)
    return write_checkpoint(tmp_path / "lm.ckpt", model, "lm", tok), corpus


@pytest.mark.parametrize(("overrides", "message"), [
    (["data=translation_toy"],
     "gives pairs examples, which suit task ['seq2seq'], not task='lm' (checkpoint "),
    (["data=text", "data.files={corpus}", "split=test"],
     "split=test: this data has no 'test' split; available: val"),
    (["data=text", "data.files={corpus}", "+max_example=3"],
     "Unknown key 'max_example'. Did you mean 'max_examples'?"),
    (["data=text", "data.files={corpus}", "+generation.beams=2"],
     "Unknown key 'generation.beams'. Did you mean 'generation.num_beams'?"),
    (["data=text", "data.files={corpus}", "generation.num_beams=0"],
     "generation.num_beams must be an integer >= 1"),
    (["data=text", "data.files={corpus}", "split=train"],
     "split must be one of 'auto', 'val', 'test', 'all', got 'train'"),
])
def test_bad_config_is_one_error(lm_checkpoint, make_eval_cfg, overrides, message):
    ckpt, corpus = lm_checkpoint
    with pytest.raises(ConfigError) as err:
        evaluate(make_eval_cfg([f"ckpt={ckpt}", "output=null",
                                *(o.format(corpus=corpus) for o in overrides)]))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("content", "message"), [
    (b"", "is not a readable PyTorch file"),  # an empty file
    # 'd': an opcode
    (b"def main():\n    pass\n", "is not a PyTorch checkpoint (it starts with b'def main():\\n': text"),
    ("torch", "is a PyTorch file but not a zoo training checkpoint (no 'zoo' section)"),
    ("missing", "checkpoint not found"),
])
def test_a_file_that_is_not_a_zoo_checkpoint_is_named(tmp_path, make_eval_cfg, content, message):
    path = tmp_path / "model.ckpt"
    if content == "torch":
        torch.save({"state_dict": {}}, path)
    elif content != "missing":  # bytes
        path.write_bytes(content)
    with pytest.raises(ConfigError, match="ckpt=") as err:
        evaluate(make_eval_cfg([f"ckpt={path}", "output=null"]))
    assert message in str(err.value) and str(path) in str(err.value)


def test_missing_ckpt_says_how_to_give_one(make_eval_cfg):
    with pytest.raises(ConfigError, match="ckpt is required, e.g. python evaluate.py ckpt="):
        evaluate(make_eval_cfg([]))


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "evaluate.py"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.e2e
def test_cli_exits_1_with_one_error_line(tmp_path, eval_cache):
    """Only what needs the script runs as a subprocess: the exit status and the `error:` line (the report
    itself is checked in-process: test_lm_reference.py, test_report_table_lists_every_metric)."""
    missing = tmp_path / "nothing.ckpt"
    bad = _run([f"ckpt={missing}", f"paths.cache_dir={eval_cache}", f"hydra.run.dir={tmp_path / 'run'}"],
               tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [f"error: ckpt={missing}: checkpoint not found: {missing}"]


def test_report_table_lists_every_metric(lm_checkpoint, make_eval_cfg):
    from rich.console import Console

    ckpt, corpus = lm_checkpoint
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=text", f"data.files={corpus}", "output=null"]))
    console = Console(width=200, record=True)
    console.print(report_table(report))
    text = console.export_text()
    assert all(name in text for name in ("loss", "perplexity", "bits_per_byte", "tokens", "bytes"))
    assert f"{report.metrics['perplexity']:.4f}" in text and "lm on text/val" in text
