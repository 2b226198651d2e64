"""A run reads each file once (plan -> open -> fit): a resumed run loads its checkpoint once (Lightning's
resume gets the dict the checks read), an init_from run parses the folder's config.json once, and a model
config that passed its checks is not checked again."""

from __future__ import annotations

import builtins
import io
from collections import Counter
from pathlib import Path

import pytest
import torch

import zoo
import zoo.models.vocabulary
import zoo.tokenizers.hf
import zoo.tokenizers.tokenizer
from zoo.models import DecoderLM
from zoo.training.run import train

from .conftest import TINY_LM, train_losses

QUICK = [*TINY_LM, "callbacks.samples=null", "eval_every=2"]


def test_a_resumed_run_reads_its_checkpoint_once_and_checks_each_config_once(make_cfg, monkeypatch):
    first = train(make_cfg([*QUICK, "trainer.max_steps=2"], run="first"))
    loads: Counter[str] = Counter()
    load = torch.load

    def counted_load(f, *args, **kwargs):
        loads[str(f)] += 1
        return load(f, *args, **kwargs)

    checked: Counter[str] = Counter()
    check = DecoderLM.check_config.__func__

    def counted_check(cls, cfg):
        checked[repr(cfg)] += 1
        return check(cls, cfg)

    monkeypatch.setattr(torch, "load", counted_load)
    monkeypatch.setattr(DecoderLM, "check_config", classmethod(counted_check))
    monkeypatch.setattr(zoo.models.vocabulary, "_CHECKED", {})  # what the first run checked counts again
    resumed = train(make_cfg([*QUICK, "trainer.max_steps=4", f"ckpt_path={first.last_checkpoint}"],
                             run="second"))
    assert sorted(train_losses(resumed.output_dir)) == [2, 3]  # it did resume, at step 2
    assert loads[str(first.last_checkpoint)] == 1  # was 6: plan (2), open (3), Lightning's resume (1)
    assert checked and set(checked.values()) == {1}, checked  # was 16 checks of 2 configs


def test_a_run_validates_each_model_config_in_one_pass(make_cfg, monkeypatch):
    """prepare, the task's checks, the meta-device plan and the real build: one validation pass per distinct
    model config (zoo.models.vocabulary.validate; was: every construction and replace of a ModelConfig)."""
    passes: Counter[str] = Counter()
    validate = zoo.models.vocabulary.validate

    def counted(cfg):
        passes[repr(cfg)] += 1
        return validate(cfg)

    monkeypatch.setattr(zoo.models.vocabulary, "_CHECKED", {})
    monkeypatch.setattr(zoo.models.vocabulary, "validate", counted)
    train(make_cfg([*QUICK, "trainer.max_steps=1"], run="once"))
    assert passes and set(passes.values()) == {1}, passes


def count_reads(monkeypatch, config_json: Path) -> tuple[Counter[str], Counter[str]]:
    """(opens of `config_json`, tokenizer.json files built into a tokenizer by path), counted from now on."""
    opens: Counter[str] = Counter()
    built: Counter[str] = Counter()

    def counting(real):
        def opened(file, *args, **kwargs):
            if isinstance(file, (str, Path)) and str(file) == str(config_json):
                opens[str(file)] += 1
            return real(file, *args, **kwargs)
        return opened

    def counted_build(path):
        built[str(path)] += 1
        return read(path)

    read = zoo.tokenizers.tokenizer.read_hf_tokenizer
    monkeypatch.setattr(io, "open", counting(io.open))  # pathlib's read_text / open
    monkeypatch.setattr(builtins, "open", counting(builtins.open))
    monkeypatch.setattr(zoo.tokenizers.tokenizer, "read_hf_tokenizer", counted_build)  # load_tokenizer's
    monkeypatch.setattr(zoo.tokenizers.hf, "read_hf_tokenizer", counted_build)  # load_hf_tokenizer's
    return opens, built


def train_from(make_cfg, source: Path, corpus: Path):
    """Two steps from `init_from=source` on `corpus` (a text file whose data the cache has not seen)."""
    corpus.write_text(corpus.read_text(encoding="utf-8") + f"\n# {corpus}\n", encoding="utf-8")
    return train(make_cfg([f"init_from={source}", "data=text", f"data.files={corpus}", "logger=csv",
                           "trainer.accelerator=cpu", "trainer.max_steps=2", "eval_every=2", "batch_size=4",
                           "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0",
                           "trainer.enable_progress_bar=false", "callbacks.samples=null"]))


def test_an_init_from_run_parses_config_json_once(make_cfg, tmp_path, monkeypatch):
    """... and builds the tokenizer shipped in the folder once (its size checked in the plan, then the
    run's)."""
    pytest.importorskip("transformers")
    from ..finetune.folders import corpus_file, gpt2_folder

    folder, corpus = gpt2_folder(tmp_path / "gpt2"), corpus_file(tmp_path / "data")
    opens, built = count_reads(monkeypatch, folder / "config.json")
    assert train_from(make_cfg, folder, corpus).last_checkpoint is not None
    # was 7: recognised twice, 4 in the plan, 1 with the weights
    assert opens[str(folder / "config.json")] == 1
    assert built[str(folder / "tokenizer.json")] == 1  # was 2: sized in the plan, built again for the data


def test_an_init_from_zoo_export_parses_config_json_once_and_builds_its_tokenizer_once(make_cfg, tmp_path,
                                                                                       monkeypatch):
    from zoo.export.native import write
    from zoo.tokenizers.trained import train_char

    from ..finetune.folders import CORPUS, corpus_file

    tok = train_char(CORPUS)
    model = zoo.build(dict(arch="decoder", vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2,
                           max_seq_len=32))
    folder = tmp_path / "export"
    folder.mkdir()
    write(folder, model, tok)
    opens, built = count_reads(monkeypatch, folder / "config.json")
    assert train_from(make_cfg, folder, corpus_file(tmp_path / "data")).last_checkpoint is not None
    assert opens[str(folder / "config.json")] == 1  # was 2: recognised, then loaded
    # was 3: loaded, sized, built for the data
    assert built[str(folder / "tokenizer" / "tokenizer.json")] == 1


def test_evaluate_generate_and_inspect_open_a_checkpoint_with_one_read(tmp_path, monkeypatch):
    """zoo.apps.open_model (evaluate.py, generate.py, inspect_model.py) reads a training checkpoint once for
    the model, its tokenizer and the task it was trained on (read twice before: the task, then the model)."""
    from zoo.apps import open_model
    from zoo.checkpoint import atomic_torch_save, zoo_section
    from zoo.tokenizers.trained import train_char

    tok = train_char(["the cat sat", "a dog ran"])
    model = zoo.build(dict(arch="decoder", vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2,
                           max_seq_len=16))
    path = tmp_path / "tiny.ckpt"
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    atomic_torch_save({"state_dict": state, "zoo": zoo_section(model.config, "lm", tok)}, path)
    loads: Counter[str] = Counter()
    load = torch.load

    def counted_load(f, *args, **kwargs):
        loads[str(f)] += 1
        return load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counted_load)
    opened, tokenizer, task = open_model(path)
    assert task == "lm" and tokenizer.encode("a cat") == tok.encode("a cat")
    assert loads[str(path)] == 1
