"""Conversational preference rows (trl's format: prompt / chosen / rejected as lists of messages, or
chosen / rejected with the prompt implicit, optionally with tools) read from JSONL and encoded through the
chat template exactly as trl's DPOTrainer prepares the same rows (its own `_prepare_dataset`:
extract_prompt, apply_chat_template, the prompt / completion split), on the templates of
tests/tokenizers/chat_templates.py."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from tests.tasks.test_sft_masks import CALL, TOOLS
from tests.tokenizers import test_chat
from tests.tokenizers.chat_templates import FAMILIES, Family
from tests.tokenizers.test_chat import write_folder
from zoo.data.preference import PreferenceRow, encode_preference, read_preference_jsonl
from zoo.data.sources.preference import load_preference
from zoo.tokenizers import load_hf_tokenizer
from zoo.tokenizers.chat import ChatTemplateError

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

USER = {"role": "user", "content": "Sky colour?"}
BLUE, GREEN = {"role": "assistant", "content": "It is blue."}, {"role": "assistant", "content": "Green!"}
ROWS = {
    "explicit": {"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN]},
    "multi_turn": {"prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                              USER], "chosen": [BLUE], "rejected": [GREEN]},
    "implicit": {"chosen": [USER, BLUE], "rejected": [USER, GREEN]},
    "tools": {"prompt": [{"role": "user", "content": "Weather in Paris?"}, CALL,
                         {"role": "tool", "content": "22 C", "tool_call_id": "call00001"}],
              "chosen": [{"role": "assistant", "content": "It is 22 C."}],
              "rejected": [{"role": "assistant", "content": "No idea."}], "tools": TOOLS},
}
# the templates that refuse a tool turn themselves (roles must alternate), in trl as in zoo
TEMPLATE_REFUSES = {("gemma", "tools"), ("gemma3", "tools"), ("mistral", "tools")}


@pytest.fixture(scope="module")
def base_tokenizer() -> str:
    return test_chat.base_tokenizer.__wrapped__()


def trl_prepared(folder: Path, row: dict) -> dict:
    """trl's DPOTrainer._prepare_dataset on the one row (its own code; the trainer's self is not read for
    conversational rows beyond the tokenizer)."""
    from trl.trainer.dpo_trainer import DPOTrainer

    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    args = types.SimpleNamespace(dataset_num_proc=None, max_length=None, truncation_mode="keep_start")
    data = datasets.Dataset.from_list([{**row, "tools": json.dumps(row["tools"])} if "tools" in row else row])
    return DPOTrainer._prepare_dataset(types.SimpleNamespace(_tokenizer=hf), data, hf, args, "train")[0]


def write(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("case", list(ROWS))
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_conversational_pairs_encode_as_trl_prepares_them(family: Family, case: str, base_tokenizer: str,
                                                         tmp_path: Path) -> None:
    folder = write_folder(base_tokenizer, family, tmp_path / "tok")
    [row] = read_preference_jsonl(write(tmp_path, [ROWS[case]]))
    assert row.conversational
    if (family.name, case) in TEMPLATE_REFUSES:  # the template's own raise_exception, in trl as in zoo
        with pytest.raises(ChatTemplateError, match=f"^{tmp_path / 'pairs.jsonl'}:1: .*roles must alternate"):
            encode_preference(row, load_hf_tokenizer(folder))  # named by its line
        with pytest.raises(Exception, match="roles must alternate"):
            trl_prepared(folder, ROWS[case])
        return
    pair = encode_preference(row, load_hf_tokenizer(folder))
    theirs = trl_prepared(folder, ROWS[case])
    assert (pair.prompt, pair.chosen, pair.rejected) == (theirs["prompt_ids"], theirs["chosen_ids"],
                                                         theirs["rejected_ids"])
    assert pair.chosen and pair.rejected


def test_implicit_prompt_of_messages_is_trls(tmp_path: Path) -> None:
    from trl import extract_prompt

    [row] = read_preference_jsonl(write(tmp_path, [ROWS["implicit"]]))
    expected = extract_prompt(ROWS["implicit"])
    assert row == PreferenceRow(tuple(expected["prompt"]), tuple(expected["chosen"]),
                                tuple(expected["rejected"]))


def test_the_source_encodes_messages_through_the_template(base_tokenizer: str, tmp_path: Path) -> None:
    """data=preference's corpus: a file of conversational rows, its arrays the template's ids."""
    qwen = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, qwen, tmp_path / "tok"))
    corpus = load_preference(path=str(write(tmp_path, [ROWS["explicit"], ROWS["implicit"]])), whole=True)
    arrays, _ = corpus.encode(tok)
    prompt = tok.chat_ids([USER], add_generation_prompt=True)
    assert arrays["train.prompt"][1].tolist() == prompt
    assert arrays["train.chosen"][1].tolist() == tok.chat_ids([USER, BLUE], add_generation_prompt=False)[
        len(prompt):]
    assert tok.decode(arrays["train.rejected"][0].tolist(), skip_special_tokens=False).startswith("Green!")
    text = corpus.content()["train"]
    assert text[0] == text[1] and "Green!" in text[0]  # the same pair, explicit or implicit: one cache key


@pytest.mark.parametrize(("row", "message"), [
    ({"prompt": "Q", "chosen": [BLUE], "rejected": [GREEN]},
     "field 'prompt' is str beside lists of messages: prompt, chosen and rejected must all be text or all"),
    ({"chosen": [BLUE], "rejected": [GREEN]}, "needs a prompt .*share no first message"),
    ({"prompt": [], "chosen": [BLUE], "rejected": [GREEN]}, "needs a prompt"),
    ({"prompt": [USER], "chosen": [], "rejected": [GREEN]}, "the chosen completion has no messages"),
    ({"prompt": [USER], "chosen": [BLUE], "rejected": [BLUE]}, "chosen and rejected are the same messages"),
    ({"prompt": [USER], "chosen": [USER], "rejected": [GREEN]}, r"prompt \+ chosen: roles out of order"),
    ({"prompt": [USER, BLUE], "chosen": [{"role": "tool", "content": "x"}], "rejected": [GREEN]},
     "the chosen completion starts with a tool turn"),
    ({"prompt": [{"role": "robot", "content": "x"}], "chosen": [BLUE], "rejected": [GREEN]},
     r"messages\[0\].role must be one of"),
    ({"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN], "tools": {"a": 1}},
     "field 'tools' must be a list of tool schemas"),
    ({"prompt": "Q", "chosen": "a", "rejected": "b", "tools": TOOLS},
     "field 'tools' is read only with messages"),
])
def test_bad_conversational_row_is_one_error_naming_file_and_line(tmp_path: Path, row: dict,
                                                                  message: str) -> None:
    path = write(tmp_path, [ROWS["explicit"], row])
    with pytest.raises(ValueError, match=f"^{path}:2: .*{message}"):
        read_preference_jsonl(path)
