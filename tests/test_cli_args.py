"""The `key=value` command lines without Hydra (serve.py, python -m zoo.embedding; generate.py has its own
file) take text keys as typed, whatever they hold, and refuse an unreadable typed value with one error naming
the key (issue 41, item 10); the five small command lines (those two, generate.py, export.py, python -m
zoo.training.consolidate) share one parser and its words (issue 35); zoo.apps.hydra_value quotes any text so
that Hydra's grammar reads it back."""

from __future__ import annotations

import dataclasses

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from tests.generation.test_cli_text import HOSTILE
from zoo.apps import hydra_value
from zoo.embedding.cli import EmbedArgs, parse_args
from zoo.export.cli import ExportArgs
from zoo.export.cli import parse as export_options
from zoo.generate_cli import GenerateCLIConfig
from zoo.generate_cli import parse_overrides as generate_options
from zoo.serving.cli import ServeConfig
from zoo.serving.cli import parse_overrides as serve_options
from zoo.training.consolidate import ConsolidateArgs
from zoo.training.consolidate import parse as consolidate_options

# the five small command lines: (parse, schema, a path key); each declares its keys in the schema
SMALL_CLIS = {
    "generate.py": (generate_options, GenerateCLIConfig, "ckpt"),
    "serve.py": (serve_options, ServeConfig, "ckpt"),
    "zoo.embedding": (parse_args, EmbedArgs, "folder"),
    "export.py": (export_options, ExportArgs, "ckpt"),
    "zoo.training.consolidate": (consolidate_options, ConsolidateArgs, "ckpt"),
}


@pytest.mark.parametrize("cli", list(SMALL_CLIS))
def test_the_five_command_lines_word_an_unknown_key_and_a_bad_value_alike(cli):
    """A misspelt key names itself, the close match and the known keys; an empty path is one bad value in
    one wording, before anything else is checked."""
    parse, schema, key = SMALL_CLIS[cli]
    known = ", ".join(f.name for f in dataclasses.fields(schema))
    with pytest.raises(ValueError) as err:
        parse([f"{key}x=a"])
    assert str(err.value) == f"Unknown key '{key}x'. Did you mean '{key}'? Known keys: {known}."
    with pytest.raises(ValueError) as err:
        parse([f"{key}="])
    assert str(err.value) == f"{key}='' is not a non-empty path."


@pytest.mark.parametrize("text", HOSTILE)
def test_serve_text_keys_are_taken_literally(text):
    cfg = serve_options([f"ckpt={text}", f"model_name={text}"])
    assert (cfg.ckpt, cfg.model_name) == (text, None if text == "null" else text)  # null: the default name
    assert serve_options([f"hf={text}"]).hf == text


@pytest.mark.parametrize("text", HOSTILE)
def test_embedding_paths_are_taken_literally(text):
    args = parse_args([f"folder={text}", f"input={text}", f"output={text}"])
    assert (args.folder, args.input, args.output) == (text, text, text)


def test_embedding_names_read_null_as_unset_and_typed_keys_as_yaml():
    args = parse_args(["pooling=null", "dtype=null", "normalize=false", "max_length=null", "batch_size=8"])
    assert (args.pooling, args.dtype, args.normalize, args.max_length, args.batch_size) == \
        (None, None, False, None, 8)


@pytest.mark.parametrize(("parse", "argv", "message"), [
    (serve_options, ["ckpt=a", "port=def f(x):"], "port='def f(x):' is not an integer."),
    (serve_options, ["ckpt=a", "timeout=..."], "timeout='...' is not a number."),
    (serve_options, ["ckpt=a", "max_batch=# 3"], "max_batch='# 3' is not an integer."),
    (serve_options, ["ckpt=a", "max_queue=!tag"], "max_queue='!tag' is not an integer."),
    (parse_args, ["batch_size=@x"], "batch_size='@x' is not an integer."),
    (parse_args, ["normalize=| x"], "normalize='| x' is not true or false or null."),
    (parse_args, ["max_length=[1, 2]"], "max_length='[1, 2]' is not an integer or null."),
])
def test_an_unreadable_typed_value_is_one_error_naming_the_key(parse, argv, message):
    with pytest.raises(ValueError) as err:
        parse(argv)
    assert str(err.value) == message


@pytest.mark.parametrize("text", [*HOSTILE, "a/b.ckpt", "it's", "a\\", "a\\'b", "\\${x}", "x\\\\'", ""])
def test_hydra_value_reads_back_as_the_text(text):
    value = OverridesParser.create().parse_override(f"key={hydra_value(text)}").value()
    assert OmegaConf.to_container(OmegaConf.create({"key": value}), resolve=True)["key"] == text


@pytest.mark.parametrize("parse", [serve_options, parse_args])
def test_an_argument_without_a_key_is_named(parse):
    """`=x` said "Unknown key ''" (generate.py "Unknown option ''"): the argument itself is named."""
    with pytest.raises(ValueError, match=r"^Arguments are key=value, got '=x'\."):
        parse(["=x"])


@pytest.mark.parametrize("key", ["#s3cr3t", "a#b c", "{k: v}", "!x", "'q'"])
def test_serve_api_key_is_taken_as_typed(key):
    """Read as YAML, a key lost what follows '#' (all of it: no key), became a mapping or lost its quotes."""
    assert serve_options(["ckpt=x", f"api_key={key}"]).api_key == key
    assert serve_options(["ckpt=x", "api_key=null", "model_name=null"]).api_key is None  # unset, not "null"
