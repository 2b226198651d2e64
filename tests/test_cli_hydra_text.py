"""The Hydra apps take their text keys as the shell gave them (issue 41, item 10): inspect_model.py's text=,
evaluate.py's ckpt= and train.py's ckpt_path= through Hydra's override grammar, run in-process from the argv
a shell makes of a typed command line (zoo.apps.literal_overrides)."""

from __future__ import annotations

import shlex
import sys

import pytest

from zoo.apps import literal_overrides


def test_inspect_model_takes_text_as_typed(tmp_path, monkeypatch, capsys):
    import inspect_model

    line = (f"inspect_model.py model=gpt_nano text='def f(x): # c {{a: 1}}' plots=false "
            f"hydra.run.dir={tmp_path}")
    monkeypatch.setattr(sys, "argv", shlex.split(line))
    inspect_model.cli()
    shown = "".join(capsys.readouterr().out.split())
    assert "6tokens:['def','f(x):','#','c','{a:','1}']" in shown


def test_evaluate_takes_a_checkpoint_path_with_equals_and_hash_as_typed(tmp_path, monkeypatch, capsys):
    import evaluate

    path = tmp_path / "epoch=1-step=9 #a.ckpt"  # a Lightning-style name: '=' broke Hydra's grammar
    line = f"evaluate.py {shlex.quote(f'ckpt={path}')} hydra.run.dir={tmp_path / 'run'}"
    monkeypatch.setattr(sys, "argv", shlex.split(line))
    with pytest.raises(SystemExit) as done:
        evaluate.cli()
    assert done.value.code == 1
    assert capsys.readouterr().err.splitlines() == [f"error: ckpt={path}: checkpoint not found: {path}"]


def test_train_takes_a_checkpoint_path_with_equals_and_hash_as_typed(tmp_path, monkeypatch, capsys):
    import train

    path = tmp_path / "epoch=1-step=9 #a.ckpt"
    line = (f"train.py {shlex.quote(f'ckpt_path={path}')} hydra.run.dir={tmp_path / 'run'} "
            f"paths.output_dir={tmp_path / 'run'}")
    monkeypatch.setattr(sys, "argv", shlex.split(line))
    with pytest.raises(SystemExit) as done:
        train.cli()
    assert done.value.code == 1
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == f"error: ckpt_path={path}: checkpoint not found: {path}"


@pytest.mark.parametrize(("given", "passed"), [
    ("text=def f(x): # c", "text='def f(x): # c'"),
    ("text='the cat sat'", "text='the cat sat'"),  # already quoted for Hydra: as it was
    ("text=the cat sat", "text=the cat sat"),
    ("text=null", "text=null"),
    ("text=${oc.env:HOME}", "text='\\${oc.env:HOME}'"),
    ("+text=a,b", "+text='a,b'"),
    ("model=gpt_small", "model=gpt_small"),  # not a text key
])
def test_literal_overrides_quote_only_what_hydra_would_misread(given, passed):
    assert literal_overrides([given], ("text",)) == [passed]
    assert literal_overrides([passed], ("text",)) == [passed]  # idempotent: a pasted line stays the same


@pytest.mark.parametrize(("given", "passed"), [
    ("init_from=hf/a,hf/b", "init_from=hf/a,hf/b"),  # a sweep: each run one folder
    ("init_from=glob(runs/*)", "init_from=glob(runs/*)"),
    ("ckpt_path=x/epoch=1-step=9.ckpt", "ckpt_path='x/epoch=1-step=9.ckpt'"),  # no sweep: still quoted
])
def test_under_multirun_a_sweep_over_a_text_key_stays_a_sweep(given, passed):
    """`python train.py -m init_from=a,b` sweeps over two folders (quoting made it one path with a comma)."""
    assert literal_overrides(["-m", given], ("init_from", "ckpt_path")) == ["-m", passed]
    assert literal_overrides([given], ("init_from", "ckpt_path"))[0] != "init_from=hf/a,hf/b"  # single run
