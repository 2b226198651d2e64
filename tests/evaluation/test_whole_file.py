"""evaluate.py split=all scores a user's file whole: a 6-row file gives 6 examples (an LM: every token of
it), for every data source that reads a user file (the registry's `whole_sources`, and data=hf for each
corpus kind it reads), where split=val scores the seeded held-out 10% (1 example). Sources with fixed
splits are refused by name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import zoo
from zoo.apps import ConfigError
from zoo.data.sources.base import SOURCES, source_keys, whole_sources
from zoo.data.sources.hf import CORPUS_READERS
from zoo.evaluation.run import evaluate
from zoo.tasks import build_data, get_task

from .conftest import write_checkpoint

ROWS = 6
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
PEOPLE, PLACES = ["Ann", "Bob", "Cid"], ["Oslo", "Rome"]


def _squad_row(i: int) -> dict:
    person, place = PEOPLE[i % 3], PLACES[i % 2]
    context = f"{WORDS[i]} {person} lives in {place}."
    return {"question": f"Where does {person} live?", "context": context,
            "answers": {"text": [place], "answer_start": [context.index(place)]}}


# corpus kind -> (task scoring it, one row of data=hf's JSONL with the columns it reads by default)
HF_ROWS = {
    "text": ("lm", lambda i: {"text": f"{WORDS[i]} line {i}"}),
    "pairs": ("seq2seq", lambda i: {"src": f"{WORDS[i]} {i}", "tgt": f"{i} {WORDS[i]}"}),
    "labelled": ("classification", lambda i: {"text": f"{WORDS[i]} {i}", "label": ["pos", "neg"][i % 2]}),
    "tagged": ("token_classification", lambda i: {"tokens": [PEOPLE[i % 3], "in", PLACES[i % 2]],
                                                  "ner_tags": ["B-PER", "O", "B-LOC"]}),
    "qa": ("question_answering", _squad_row),
    "chat": ("sft", lambda i: {"messages": [{"role": "user", "content": f"Where is {PEOPLE[i % 3]}?"},
                                            {"role": "assistant", "content": f"{PEOPLE[i % 3]} is in "
                                                                             f"{PLACES[i % 2]}."}]}),
}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _write(source: str, folder: Path) -> tuple[str, dict]:
    """(task, data config) of a 6-row file in `source`'s format."""
    if source == "text":
        path = folder / "test.txt"
        path.write_text("".join(f"{WORDS[i]} line {i}\n" for i in range(ROWS)), encoding="utf-8")
        return "lm", {"name": "text", "files": str(path)}
    if source == "pairs":
        path = folder / "test.tsv"
        path.write_text("".join(f"{WORDS[i]} {i}\t{i} {WORDS[i]}\n" for i in range(ROWS)), encoding="utf-8")
        return "seq2seq", {"name": "pairs", "path": str(path)}
    if source == "classification":
        return "classification", {"name": source, "path": str(_jsonl(folder / "test.jsonl", [
            HF_ROWS["labelled"][1](i) for i in range(ROWS)]))}
    if source == "token_tags":
        rows = [{"tokens": r["tokens"], "tags": r["ner_tags"]}
                for r in map(HF_ROWS["tagged"][1], range(ROWS))]
        return "token_classification", {"name": source, "path": str(_jsonl(folder / "test.jsonl", rows))}
    if source == "squad":
        return "question_answering", {"name": source, "path": str(_jsonl(folder / "test.jsonl", [
            _squad_row(i) for i in range(ROWS)]))}
    if source == "chat":  # rows of one shape: every assistant turn trains the same number of tokens
        rows = [HF_ROWS["chat"][1](i) for i in range(ROWS)]
        return "sft", {"name": source, "path": str(_jsonl(folder / "test.jsonl", rows))}
    if source == "preference":  # scored against reference=<the checkpoint itself>: margins 0, loss ln 2
        rows = [{"prompt": f"Where is {PEOPLE[i % 3]}? ", "chosen": PLACES[i % 2],
                 "rejected": PLACES[1 - i % 2]} for i in range(ROWS)]
        return "dpo", {"name": source, "path": str(_jsonl(folder / "test.jsonl", rows))}
    if source == "prompts":  # scored by the run's rewards (kept in the checkpoint) on sampled completions
        rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(ROWS)]
        return "grpo", {"name": source, "path": str(_jsonl(folder / "test.jsonl", rows))}
    raise AssertionError(f"no 6-row file for data source {source!r}: add one here")


def _hf(kind: str, folder: Path) -> tuple[str, dict]:
    task, row = HF_ROWS[kind]
    return task, {"name": "hf", "path": str(_jsonl(folder / "test.jsonl", [row(i) for i in range(ROWS)]))}


PRESETS = {"lm": ("gpt_nano", {}),
           "seq2seq": ("transformer_tiny", {"encoder_layers": 1, "decoder_layers": 1}),
           "classification": ("bert_small", {"head": "classifier", "n_layers": 1}),
           "token_classification": ("bert_small", {"head": "token_classifier", "n_layers": 1}),
           "question_answering": ("bert_small", {"head": "qa", "n_layers": 1}), "sft": ("gpt_nano", {}),
           "dpo": ("gpt_nano", {}), "grpo": ("gpt_nano", {})}


def _checkpoint(tmp_path: Path, task_name: str, data_cfg: dict) -> tuple[Path, object]:
    """A tiny untrained checkpoint for `task_name` with a char tokenizer read from the data."""
    task = get_task(task_name)
    tok, _ = build_data(data_cfg, {"name": "char"}, task=task, max_seq_len=64, batch_size=4,
                        cache_dir=tmp_path / "c", whole=True)
    preset, extra = PRESETS[task_name]
    labels = {"head": {"name": extra["head"], "num_labels": len(tok.label_names)}} if tok.label_names else {}
    base = zoo.build(preset, d_model=32, n_heads=2, d_ff=64, max_seq_len=64, **{**extra, **labels}).config
    model = zoo.build(task.model_config(base, tok))
    settings = {"grpo": {"rewards": ["answer_match"], "num_generations": 2, "max_completion_length": 2}}
    state = {"task_state": task.for_model(model, settings.get(task_name, {})).run_state()} \
        if task_name in ("dpo", "grpo") else {}
    return write_checkpoint(tmp_path / f"{task_name}.ckpt", model, task_name, tok, **state), tok


CASES = [pytest.param(source, _write, id=source) for source in sorted(set(whole_sources()) - {"hf"})] + [
    pytest.param(kind, _hf, id=f"hf-{kind}") for kind in sorted(CORPUS_READERS)]


def test_every_source_that_reads_a_file_has_a_case():
    reads_files = {name for name in SOURCES.names() if {"path", "files"} & source_keys(name)}
    assert reads_files == set(whole_sources()) and "hf" in reads_files
    assert set(HF_ROWS) == set(CORPUS_READERS)  # a new data=hf kind needs its row above


@pytest.mark.parametrize(("name", "writer"), CASES)
def test_split_all_scores_every_row_of_the_file(tmp_path, make_eval_cfg, name, writer):
    task, data_cfg = writer(name, tmp_path)
    ckpt, tok = _checkpoint(tmp_path, task, data_cfg)
    data = [f"data={data_cfg['name']}", *(f"data.{k}={v}" for k, v in data_cfg.items() if k != "name")]
    run = [f"ckpt={ckpt}", *data, "output=null", "generation.max_new_tokens=2", "batch_size=4"]
    if task == "dpo":
        with pytest.raises(ConfigError, match="give reference=<the model the DPO run started from"):
            evaluate(make_eval_cfg([*run, "split=all"]))
        run.append(f"reference={ckpt}")
    whole = evaluate(make_eval_cfg([*run, "split=all"]))
    assert whole.split == "all"
    if writer is _hf:  # data=hf holds out rows by a hash: 10% of 6 rows is none
        with pytest.raises(ConfigError, match="has no rows"):
            evaluate(make_eval_cfg([*run, "split=val"]))
        held_out = None
    else:
        held_out = evaluate(make_eval_cfg([*run, "split=val"]))
    if task == "lm":  # every token of the file: the stream (each document and its <eos>) minus the first
        docs = ([Path(data_cfg["files"]).read_text(encoding="utf-8")] if data_cfg["name"] == "text" else
                [json.loads(line)["text"] for line in Path(data_cfg["path"]).read_text().splitlines()])
        assert whole.metrics["tokens"] == sum(len(tok.encode(d)) + 1 for d in docs) - 1
        assert held_out is None or held_out.metrics["tokens"] < whole.metrics["tokens"]
    elif task == "sft":  # trained (assistant) tokens: 6 rows of one shape against the 1 held out
        per_row = held_out.metrics["tokens"] if held_out else whole.metrics["tokens"] // ROWS
        assert whole.metrics["tokens"] == ROWS * per_row and per_row >= len(tok.encode("Ann is in Oslo."))
    elif task == "dpo":  # every pair, scored against itself: the closed forms
        assert whole.metrics["pairs"] == ROWS and held_out.metrics["pairs"] == 1
        assert whole.metrics["loss"] == pytest.approx(math.log(2), abs=1e-6)
        assert whole.metrics["rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    else:
        assert whole.metrics["examples"] == ROWS
        assert held_out is None or held_out.metrics["examples"] == 1


@pytest.mark.parametrize(("extra", "message"), [
    (["data=stdlib_text", "data.max_bytes=20000"],
     "split=all scores a file of yours whole; data=stdlib_text reads none"),
    (["data=translation_toy"], "split=all scores a file of yours whole; data=translation_toy reads none"),
])
def test_split_all_on_built_in_data_is_one_error(tmp_path, make_eval_cfg, extra, message):
    task, data_cfg = _write("pairs" if "translation_toy" in extra[0] else "text", tmp_path)
    ckpt, _ = _checkpoint(tmp_path, task, data_cfg)
    with pytest.raises(ConfigError, match=message) as e:
        evaluate(make_eval_cfg([f"ckpt={ckpt}", *extra, "split=all", "output=null"]))
    assert "sources that read a file: " in str(e.value) and "pairs" in str(e.value)


def test_split_all_with_a_separate_validation_file_is_one_error(tmp_path, make_eval_cfg):
    task, data_cfg = _write("squad", tmp_path)
    ckpt, _ = _checkpoint(tmp_path, task, data_cfg)
    with pytest.raises(ConfigError, match=r"data.val_path='.*': the data is read whole .* leave data.val_p"):
        evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=squad", f"data.path={data_cfg['path']}",
                                f"data.val_path={data_cfg['path']}", "split=all", "output=null"]))
