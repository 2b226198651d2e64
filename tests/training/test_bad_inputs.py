"""Every row of bad_inputs.OVERRIDES raises its one ConfigError from `prepare` before anything is built or
written; rows checked elsewhere name a test that raises them; docs/training.md shows the current table;
train.py turns such an error into one `error:` line and exit code 1."""

from __future__ import annotations

import ast

import pytest
from hydra import compose, initialize_config_dir

from zoo.apps import ConfigError
from zoo.hydra_schema import part_overrides
from zoo.training.plan import prepare

from .bad_inputs import CHECKED_ELSEWHERE, DOC, OVERRIDES, PREPARE_TEST, ROOT, render
from .conftest import CONF


def compose_into(tmp_path, overrides: list[str]):
    """The config train.py would compose, with its run folder, runs dir and cache under tmp_path."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[*part_overrides(overrides),  # model.<part>=... as train.py
                                            f"paths.output_dir={tmp_path / 'run'}",
                                            f"paths.runs_dir={tmp_path / 'runs'}",
                                            f"paths.cache_dir={tmp_path / 'cache'}"])


@pytest.mark.parametrize("case", OVERRIDES, ids=lambda case: case.given)
def test_rejected_by_prepare(tmp_path, case):
    cfg = compose_into(tmp_path, case.overrides)
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    assert case.message in str(err.value)
    assert "\n" not in str(err.value)  # one line
    assert list(tmp_path.iterdir()) == []  # no run folder, no cache: nothing was built or written


def test_rows_are_distinct_and_name_their_test():
    given = [row.given for row in [*OVERRIDES, *CHECKED_ELSEWHERE]]
    assert len(given) == len(set(given))
    assert all(row.checked_by == PREPARE_TEST for row in OVERRIDES)


@pytest.mark.parametrize("row", CHECKED_ELSEWHERE, ids=lambda row: row.given)
def test_rows_checked_elsewhere_name_a_test_that_raises_them(row):
    path, name = row.checked_by.split("::")
    tree = ast.parse(source := (ROOT / path).read_text(encoding="utf-8"))
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert name in functions, f"{row.checked_by} does not exist"
    node = functions[name]
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])  # parametrized cases count too
    segment = "\n".join(source.splitlines()[first - 1: node.end_lineno])
    assert row.message in segment, f"{name} does not check {row.message!r}"


def test_docs_table_is_rendered_from_the_list():
    assert render() in DOC.read_text(encoding="utf-8"), "run `python -m tests.training.bad_inputs`"


@pytest.mark.e2e
def test_train_py_prints_one_error_line(run_cli, tmp_path):
    case = next(row for row in OVERRIDES if row.given == "optim.lr=abc")
    proc = run_cli([*case.overrides, f"hydra.run.dir={tmp_path / 'run'}",
                    f"paths.cache_dir={tmp_path / 'cache'}"])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and case.message in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run" / "checkpoints").exists()
