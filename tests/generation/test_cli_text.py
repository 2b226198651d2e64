"""generate.py's free text (prompt, src, system, paths) is taken literally from a real shell command line,
whatever it holds; a typed key's unreadable value is one error naming it; the closing summary of a training
run suggests command lines that run when pasted into a shell (issue 41, item 10)."""

from __future__ import annotations

import io
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from tests.generation.test_cli import _checkpoint
from zoo.generate_cli import main, parse_overrides
from zoo.training.console import summary_lines
from zoo.training.run import TrainResult

# what the YAML reading of a value dropped, changed or choked on: a mapping, a comment, YAML's document end,
# flow collections, tags, aliases, block scalars, booleans and numbers as words, quotes, newlines
HOSTILE = ["def f(x):", "# comment", "...", "x #y", "a: b", "{a: 1}", "[1, 2]", "${oc.env:HOME}", "-x",
           "a\nb", "héllo ☃ 日本", "'quoted'", '"dq"', "null", "true", "3", "%foo", "@x", "!tag", "*alias",
           "&a b", "| x", "> x", "?", "\\", "a,b", "a=b", " padded ", "---"]


@pytest.mark.parametrize("text", HOSTILE)
def test_free_text_keys_are_taken_literally(text):
    assert parse_overrides([f"ckpt={text}", f"prompt={text}"]).prompt == text
    assert parse_overrides([f"ckpt={text}", f"prompt={text}"]).ckpt == text
    assert parse_overrides(["ckpt=x", f"src={text}"]).src == text
    chat = parse_overrides(["ckpt=x", "chat=true", f"system={text}", "prompt=hi"])
    assert chat.system == text


@pytest.mark.parametrize("typed", ["def f(x):", "# c", "...", "@x", "!tag", "*alias", "| x", "[1, 2]",
                                   "{a: 1}", "${oc.env:HOME}", "", "3.5"])
@pytest.mark.parametrize("key", ["max_new_tokens", "top_k", "batch_size", "do_sample", "temperature"])
def test_a_typed_key_with_an_unreadable_value_is_one_error_naming_it(key, typed):
    if key == "temperature" and typed == "3.5":
        return  # a number
    with pytest.raises(ValueError, match=rf"^{key}=") as err:
        parse_overrides(["ckpt=x", "prompt=hi", f"{key}={typed}"])
    assert "is not" in str(err.value)


def test_typed_values_read_as_hydra_reads_them():
    cfg = parse_overrides(["ckpt=x", "prompt=hi", "temperature=1e-3", "do_sample=true", "seed=null",
                           "top_k=5", "cache_implementation=null"])
    assert (cfg.temperature, cfg.do_sample, cfg.seed, cfg.top_k) == (0.001, True, None, 5)
    assert cfg.cache_implementation is None
    with pytest.raises(ValueError, match="prompt= is given twice"):
        parse_overrides(["ckpt=x", "prompt=a", "prompt=b"])


@pytest.mark.parametrize("text", ["def f(x):", "# comment", "x #y {a: 1} ${oc.env:HOME}", "null"])
def test_a_shell_command_line_generates_from_the_text_as_typed(tmp_path, text):
    path, _, _ = _checkpoint(tmp_path, "decoder")
    line = f"python generate.py ckpt={shlex.quote(str(path))} prompt={shlex.quote(text)} max_new_tokens=2"
    out = io.StringIO()
    assert main(shlex.split(line)[2:], stdout=out) == 0
    assert out.getvalue().splitlines()[0] == f">>> {text}"


def _pasted(lines: list[str], label: str) -> list[str]:
    """The argv a shell gives the summary line `label:` when it is pasted."""
    line = next(x for x in lines if x.strip().startswith(f"{label}:"))
    return shlex.split(line.split(":", 1)[1])


def test_the_summary_generate_line_runs_when_pasted(tmp_path):
    folder = tmp_path / "my run (2)"
    folder.mkdir()
    best, _, _ = _checkpoint(folder, "decoder")
    result = TrainResult({}, folder, best, best, None, generate_with="prompt")
    argv = _pasted(summary_lines(result, ["model=gpt_small"]), "generate")
    assert argv[:2] == ["python", "generate.py"] and f"ckpt={best}" in argv
    out = io.StringIO()
    assert main([*argv[2:], "max_new_tokens=2"], stdout=out) == 0
    assert out.getvalue().splitlines()[0] == ">>> ..."


@pytest.mark.e2e  # a real shell: the summary's generate line pasted into bash, the prompt edited in place
def test_the_summary_generate_line_pasted_into_bash_runs(tmp_path):
    folder = tmp_path / "my run (2)"
    folder.mkdir()
    best, _, _ = _checkpoint(folder, "decoder")
    line = next(x for x in summary_lines(TrainResult({}, folder, best, best, None, generate_with="prompt"))
                if x.strip().startswith("generate:")).split(":", 1)[1].strip()
    assert line.startswith("python generate.py ")
    typed = shlex.quote(sys.executable) + line.removeprefix("python").replace('"..."', '"def f(x): # {a: 1}"')
    typed += " max_new_tokens=2"
    done = subprocess.run(["bash", "-c", typed], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == ">>> def f(x): # {a: 1}"


def test_the_summary_resume_line_gives_train_py_the_same_overrides(tmp_path):
    last = tmp_path / "my run #2" / "last.ckpt"
    overrides = ["model=gpt_small", "name=my run", "data.path='it''s: here'", "ckpt_path=old.ckpt"]
    result = TrainResult({}, tmp_path, None, last, None)
    argv = _pasted(summary_lines(result, overrides), "resume")
    assert argv[:2] == ["python", "train.py"] and argv[2:-1] == overrides[:3]
    parsed = OverridesParser.create().parse_override(argv[-1])  # as train.py's Hydra reads it
    assert (parsed.key_or_group, parsed.value()) == ("ckpt_path", str(last))
