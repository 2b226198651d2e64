"""zoo.training.options: the callback option declarations stay in step with the callbacks they configure."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar

from zoo.inspection.callback import AttentionMapLogger
from zoo.options import Options
from zoo.tasks import TASKS
from zoo.training.callbacks import CALLBACKS, TokensPerSecond, ValExactMatch
from zoo.training.console import LineProgress
from zoo.training.options import compile_options


def _keys(name: str) -> set[str]:
    return set(CALLBACKS.get(name).options.rules)  # what each declares beside its builder


def test_every_registered_callback_declares_its_options():
    assert CALLBACKS.names()
    assert all(isinstance(CALLBACKS.get(name).options, Options) for name in CALLBACKS.names())


def test_declared_options_are_the_constructor_arguments():
    assert _keys("tokens_per_s") == set(Options.of(TokensPerSecond.__init__).rules)
    assert _keys("exact_match") == set(Options.of(ValExactMatch.__init__,
                                                  skip=("task", "tokenizer", "datamodule")).rules)
    assert _keys("attention_maps") == set(Options.of(AttentionMapLogger.__init__).rules)
    assert _keys("checkpoint") <= set(inspect.signature(ModelCheckpoint).parameters)
    bar_keys = _keys("progress_bar") - {"style", "every_n_steps"}  # style picks the bar or the lines
    assert bar_keys <= set(inspect.signature(RichProgressBar).parameters)
    assert "every_n_steps" in inspect.signature(LineProgress).parameters


def test_samples_options_are_the_keys_the_samplers_read():
    """callbacks.samples.* are the keys the tasks' `samples` methods read (every registered task)."""
    sources = {inspect.getsourcefile(type(TASKS.get(name))) for name in TASKS.names()}
    read = {key for path in sources
            for key in re.findall(r'cfg\["(\w+)"\]', Path(path).read_text(encoding="utf-8"))}
    assert _keys("samples") == read


def test_compile_options_follow_this_torch():
    import torch._dynamo

    options = compile_options()
    assert options.rules["backend"].test("inductor") and not options.rules["backend"].test("inductr")
    assert all(options.rules["backend"].test(name) for name in torch._dynamo.list_backends())


def test_the_default_compile_backend_is_checked_without_listing_every_backend(monkeypatch):
    """compile.backend=inductor (torch.compile's default and conf/config.yaml's) needs no list of backends:
    listing them imports every backend module and scans the installed packages' entry points (~0.2 s CPU of
    every run's start-up, issue 42). Another name is checked against the list, and a bad one names it."""
    import torch._dynamo

    listed = []
    real = torch._dynamo.list_backends
    monkeypatch.setattr(torch._dynamo, "list_backends", lambda *a, **k: listed.append(1) or real(*a, **k))
    compile_options.cache_clear()
    try:
        compile_options().check("compile", {"enabled": "auto", "backend": "inductor", "mode": None})
        assert listed == []
        compile_options().check("compile", {"enabled": True, "backend": "eager", "mode": None})
        with pytest.raises(ValueError, match=r"compile.backend must be one of .*'inductor'.*, got 'inductr'"):
            compile_options().check("compile", {"enabled": True, "backend": "inductr", "mode": None})
        assert listed
    finally:
        compile_options.cache_clear()
