"""Property-based fuzzing (hypothesis; bounded, derandomized) of the command lines' `key=value` parsers and
of the config vocabulary: for any key and value drawn from the vocabulary and from hostile strings, the
result is accepted (a text key's value as typed) or ONE ValueError naming the key, never a traceback of
another type (issue 41)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import MISSING, fields

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo
from tests.generation.test_cli_text import HOSTILE
from zoo.apps import hydra_value, literal_overrides, parse_key_values
from zoo.config import MODEL_OPTIONS, PARTS, ModelConfig, _plain
from zoo.embedding.cli import EmbedArgs, parse_args
from zoo.export.cli import ExportArgs
from zoo.export.cli import parse as export_options
from zoo.generate_cli import GenerateCLIConfig
from zoo.generate_cli import parse_overrides as generate_options
from zoo.generation.config import GENERATION_OPTIONS
from zoo.models.vocabulary import named_choices
from zoo.options import Options
from zoo.serving.cli import ServeConfig
from zoo.serving.cli import parse_overrides as serve_options
from zoo.training.consolidate import ConsolidateArgs
from zoo.training.consolidate import parse as consolidate_options


# derandomized: the same examples on every run and machine; sized so the whole file takes seconds
def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# values as a command line gives them: YAML words, numbers at and past every bound, and hostile text
WORDS = ["true", "false", "null", "None", "~", "0", "-1", "1", "2", "3.5", "1e-3", "1e309", "-1e309", "nan",
         ".nan", ".inf", "inf", "0x10", "1_000", "9" * 5000, "yes", "off", "cpu", "cuda", "meta", "static",
         "", " ", "=", "==", "+", "[]", "{}", "[[[[[[[[[[", "${a.b}", "${oc.env:HOME}", "\x00", "\ud800"]
VALUES = st.one_of(st.sampled_from(WORDS + HOSTILE), st.text(max_size=12))


def _app_keys(schema: type) -> list[str]:
    return [f.name for f in dataclasses.fields(schema)]


# (parse, a valid command line to add one argument to, the schema)
APPS = {
    "generate.py": (generate_options, ["ckpt=x", "prompt=hi"], GenerateCLIConfig),
    "serve.py": (serve_options, ["ckpt=x"], ServeConfig),
    "zoo.embedding": (parse_args, ["folder=f", "input=i", "output=o.npy"], EmbedArgs),
    "export.py": (export_options, ["ckpt=x", "dir=out"], ExportArgs),
    "zoo.training.consolidate": (consolidate_options, ["ckpt=x", "out=o.ckpt"], ConsolidateArgs),
}


def _one_argument(schema: type) -> st.SearchStrategy[tuple[str, str]]:
    keys = st.one_of(st.sampled_from(_app_keys(schema)), st.sampled_from(["", "+", "prompt ", "ckpt.x", "é"]),
                     st.text(max_size=6))
    return st.tuples(keys, VALUES)


def _is_text(schema: type, key: str) -> bool:
    hint = typing.get_type_hints(schema).get(key)
    return hint is not None and str in (hint, *typing.get_args(hint))


@pytest.mark.parametrize("app", list(APPS))
def test_command_line_arguments_are_accepted_or_one_error_naming_them(app):
    parse, base, schema = APPS[app]

    @fuzz(120)
    @given(argument=_one_argument(schema), bare=st.booleans())
    def check(argument, bare):
        arg = argument[0] if bare else "=".join(argument)
        name, sep, value = arg.partition("=")
        name = name.removeprefix("+")
        argv = [a for a in base if a.split("=", 1)[0] != name] + [arg]
        try:
            parsed = parse(argv)
        except ValueError as e:
            named = name if sep and name else arg  # the key, or the whole argument without one
            assert named in str(e) or repr(named) in str(e), (argv, str(e))  # as typed, or quoted
            return
        if sep and _is_text(schema, name) and getattr(parsed, name) is not None:  # None: a name's null
            assert getattr(parsed, name) == value  # text as typed

    check()


@fuzz(150)
@given(argv=st.lists(st.tuples(st.sampled_from(_app_keys(GenerateCLIConfig)), VALUES), max_size=5))
def test_many_generate_arguments_are_accepted_or_one_value_error(argv):
    try:
        generate_options([f"{k}={v}" for k, v in argv])
    except ValueError:
        pass


# Python values a config or a library caller may hold: every kind, at and past every bound
PY_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70), st.sampled_from([2**31, 2**63, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.sampled_from(HOSTILE),
    st.lists(st.integers(-2, 5), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.tuples(st.floats(), st.floats()), st.just(object()))


def _every_rule() -> Options:
    """Every declared key's rule: the model's spine and the decoding options (the parts' keys are their
    settings classes', fuzzed through zoo.build below)."""
    return Options({**MODEL_OPTIONS.rules, **GENERATION_OPTIONS.rules})


RULES = _every_rule()


@fuzz(400)
@given(key=st.sampled_from(sorted(RULES.rules)), value=PY_VALUES)
def test_every_rule_accepts_or_raises_one_value_error_naming_its_key(key, value):
    try:
        RULES.rules[key].check(f"model.{key}", value)
    except ValueError as e:
        assert f"model.{key}" in str(e), str(e)


# A tiny config every key is laid over, built on the meta device (no memory, any size)
TINY = dict(arch="decoder", d_model=16, n_heads=2, n_layers=1, vocab_size=32, max_seq_len=16)
DEFAULTS = {f.name: _plain(f.default_factory() if f.default is MISSING else f.default)
            for f in fields(ModelConfig)}
FIELDS = sorted(DEFAULTS)
CHOICES = {**{key: registry.names() for key, registry in named_choices().items()},
           **{key: table.names() for key, table in PARTS.items()}}


def _model_value(key: str) -> st.SearchStrategy[object]:
    small = st.one_of(st.none(), st.booleans(), st.integers(-2, 8), st.floats(-2, 10), st.sampled_from(
        [float("nan"), float("inf"), 10**400, "", "rope", "none", "true"]), st.sampled_from(HOSTILE),
        st.lists(st.integers(0, 4), max_size=2), st.dictionaries(st.sampled_from(["top_k", "x"]),
                                                                 st.integers(0, 3), max_size=2))
    usual = st.sampled_from([DEFAULTS.get(key), *CHOICES.get(key, [])])  # the key's own vocabulary
    return st.one_of(usual, small)


@fuzz(200)
@given(data=st.data())
def test_build_with_any_one_key_builds_or_one_value_error_naming_it(data):
    key = data.draw(st.one_of(st.sampled_from(FIELDS), st.sampled_from(["d_modle", "", "ffn.top_k"])))
    value = data.draw(_model_value(key))
    try:
        with torch.device("meta"):
            zoo.build(dict(TINY), **{key: value})
    except ValueError as e:  # an inner key (ffn.top_k) may be named with its part (model.ffn=...)
        assert key.split(".")[0] in str(e), (key, value, str(e))


@fuzz(150)
@given(data=st.data())
def test_build_with_any_keys_together_builds_or_one_value_error(data):
    keys = data.draw(st.lists(st.sampled_from(FIELDS), min_size=2, max_size=4, unique=True))
    overrides = {key: data.draw(_model_value(key)) for key in keys}
    try:
        with torch.device("meta"):
            zoo.build(dict(TINY), **overrides)
    except ValueError:
        pass


def _override_value(value: object) -> str:
    """A Python value as a Hydra override writes it (text quoted as zoo.apps.hydra_value quotes it)."""
    if isinstance(value, str):
        return hydra_value(value)
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)


@pytest.mark.e2e
@fuzz(25)
@given(key=st.sampled_from(FIELDS), value=st.one_of(
    st.none(), st.booleans(), st.integers(-2, 8), st.floats(-2, 10), st.sampled_from(HOSTILE + ["rope", ""])))
def test_train_py_model_key_composes_and_plans_or_one_error_naming_it(key, value):
    """train.py's path: Hydra composes model/_schema (zoo.hydra_schema) with `model.<key>=<value>`, then
    prepare checks it. Hydra's own error names the override; prepare's is one ConfigError naming the key."""
    import tempfile

    from hydra.errors import HydraException

    from tests.train_config import compose_as_train, release_hydra_config
    from zoo.apps import ConfigError
    from zoo.training.plan import prepare

    override = f"model.{key}={_override_value(value)}"
    with tempfile.TemporaryDirectory() as out:
        try:
            prepare(compose_as_train(["model=gpt_nano", f"paths.output_dir={out}/run", override]))
        except HydraException as e:  # Hydra's: printed as one error by @hydra.main
            assert f"model.{key}" in str(e), (override, str(e))
        except ConfigError as e:
            assert key in str(e), (override, str(e))
        finally:
            release_hydra_config()


@fuzz(200)
@given(text=st.one_of(st.sampled_from(HOSTILE + WORDS), st.text(max_size=20)))
def test_hydra_value_reads_back_as_any_text(text):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    if "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return  # no shell or argv can carry these
    value = OverridesParser.create().parse_override(f"key={hydra_value(text)}").value()
    assert OmegaConf.to_container(OmegaConf.create({"key": value}), resolve=True)["key"] == text


@fuzz(200)
@given(text=st.one_of(st.sampled_from(HOSTILE + WORDS), st.text(max_size=20)))
def test_literal_overrides_give_hydra_any_text_as_typed(text):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    if "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return  # no shell or argv can carry these
    if text == "null" or (len(text) > 1 and text[0] == text[-1] and text[0] in "'\""):
        return  # Hydra's null, and a value quoted for Hydra, are Hydra's (left as they are)
    (arg,) = literal_overrides([f"text={text}"], ("text",))
    value = OverridesParser.create().parse_override(arg).value()
    assert OmegaConf.to_container(OmegaConf.create({"text": value}), resolve=True)["text"] == text


def test_parse_key_values_reads_each_type_of_field():
    @dataclasses.dataclass
    class Args:
        name: str = "a"
        size: int = 1
        rate: float | None = None
        on: bool = False

    assert parse_key_values(["name=#x: {y}", "size=0x10", "rate=1e-3", "on=true"], Args) == \
        Args("#x: {y}", 16, 0.001, True)


# Regressions the fuzzing found, each named

@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_a_number_rule_refuses_an_int_past_float_range_naming_the_key(value):
    """math.isfinite raised OverflowError on an int too large for a float (model.dropout=10**400)."""
    with pytest.raises(ValueError) as err:
        MODEL_OPTIONS.rules["dropout"].check("model.dropout", value)
    assert str(err.value).startswith("model.dropout must be in [0, 1), got ")
    with pytest.raises(ValueError, match=r"model\.dropout"):
        zoo.build(dict(TINY), dropout=value)


def test_hydra_value_quotes_digits_past_python_int_limit():
    """Hydra's grammar raised a bare ValueError converting 5,000 digits to an int."""
    assert hydra_value("9" * 5000) == "'" + "9" * 5000 + "'"
