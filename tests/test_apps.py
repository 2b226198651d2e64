"""zoo.apps: `bad_input`, the one handler where an app prepares or opens its run (train.py's prepare and
open_run, evaluate.py's checks): a check's ValueError becomes the ConfigError (one `error:` line) with the key
it concerns before it, once, however the handlers nest."""

from __future__ import annotations

import pytest

from zoo.apps import ConfigError, bad_input


def test_a_checks_value_error_becomes_the_config_error_with_its_key():
    with pytest.raises(ConfigError) as err:
        with bad_input("ckpt_path=a.ckpt: "):
            raise ValueError("checkpoint not found: a.ckpt")
    assert str(err.value) == "ckpt_path=a.ckpt: checkpoint not found: a.ckpt"
    assert err.value.__cause__ is None and err.value.__suppress_context__  # one line, no chained traceback


def test_an_inner_handlers_config_error_passes_the_outer_one_unchanged():
    """open_run's handler holds the resume checks' own (`ckpt_path=...: `): the key is said once."""
    with pytest.raises(ConfigError) as err:
        with bad_input("outer: "):
            with bad_input("ckpt_path=last: "):
                raise ValueError("no earlier run")
    assert str(err.value) == "ckpt_path=last: no earlier run"


def test_errors_that_are_not_bad_input_pass_as_they_are():
    with pytest.raises(TypeError, match="^a bug$"):
        with bad_input("key: "):
            raise TypeError("a bug")
    with bad_input():  # nothing raised: nothing happens
        pass

