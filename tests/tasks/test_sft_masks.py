"""task=sft's loss masks against transformers: the ids equal apply_chat_template's, the assistant mask equals
transformers' return_assistant_tokens_mask on a template with {% generation %} markers, and on the real
templates without markers (Llama 3.2, Qwen2.5, Mistral-Nemo, Gemma 2, Gemma 3, Phi-3.5-mini, SmolLM2) equals
the turns found by transformers' own rendering of prefixes (multi-turn, a system turn, tools; where the
template itself refuses, both refuse with its message); Qwen3's reasoning_content reaches the template; bad
rows are refused naming file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tokenizers import test_chat
from tests.tokenizers.chat_templates import FAMILIES, Family
from tests.tokenizers.test_chat import write_folder
from zoo.data.chat_masks import encode_row
from zoo.data.chat_rows import read_jsonl, read_row
from zoo.tokenizers import load_hf_tokenizer

transformers = pytest.importorskip("transformers")

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function",
          "function": {"name": "get_weather", "description": "Weather in a city", "parameters": CITY}}]
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call00001", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
CONVERSATIONS = {
    "multi_turn": ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there!"},
                    {"role": "user", "content": "Joke?"}, {"role": "assistant", "content": "No jokes."}],
                   None),
    "system": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hey."}], None),
    "tools": ([{"role": "user", "content": "Weather in Paris?"}, CALL,
               {"role": "tool", "content": "22 C", "tool_call_id": "call00001"},
               {"role": "assistant", "content": "It is 22 C."}], TOOLS),
}


@pytest.fixture(scope="module")
def base_tokenizer() -> str:
    return test_chat.base_tokenizer.__wrapped__()


# the shipped templates without {% generation %} markers (Qwen3: test_reasoning_content_*)
REAL = [f for f in FAMILIES if f.name in ("llama3.2", "qwen2.5", "mistral-nemo", "gemma", "gemma3", "phi3",
                                          "smollm")]
# (family, case) -> the template's own refusal, the same in transformers and zoo
TEMPLATE_REFUSES = {("gemma", "system"): "System role not supported",
                    ("gemma", "tools"): "Conversation roles must alternate",
                    ("gemma3", "tools"): "Conversation roles must alternate"}


# SmolLM's ChatML with {% generation %} around each assistant reply and its end token (as trl's tests mark)
MARKED = ("{% for message in messages %}{% if message['role'] == 'assistant' %}"
          "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}"
          "{% endgeneration %}{{ '\n' }}{% else %}"
          "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
          "{% endif %}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def prefix_mask(hf, messages: list[dict], tools) -> list[int]:
    """The assistant turns by transformers' own tokens: turn i is what messages[:i + 1] adds to messages[:i]
    with the generation prompt, up to where its tokens stop agreeing with the whole chat's (Phi-3.5 writes
    eos_token only after the last message)."""
    def ids(turns, prompt):
        return list(hf.apply_chat_template(turns, tools=tools, tokenize=True, return_dict=False,
                                           add_generation_prompt=prompt))
    full = ids(messages, False)
    mask = [0] * len(full)
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            upto = ids(messages[: i + 1], False)
            agree = [a == b for a, b in zip(upto, full, strict=False)]
            end = agree.index(False) if False in agree else len(agree)
            mask[len(ids(messages[:i], True)): end] = [1] * (end - len(ids(messages[:i], True)))
    return mask


@pytest.mark.parametrize("family", REAL, ids=lambda f: f.name)
@pytest.mark.parametrize("case", list(CONVERSATIONS))
def test_assistant_mask_equals_transformers_prefix_turns(family: Family, case: str, base_tokenizer: str,
                                                         tmp_path: Path) -> None:
    messages, tools = CONVERSATIONS[case]
    if family.name == "mistral-nemo" and case == "system":  # it moves the system text to the last user turn
        pytest.skip("refused: test_template_that_rewrites_earlier_turns_is_refused")
    folder = write_folder(base_tokenizer, family, tmp_path / family.name)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    if (family.name, case) in TEMPLATE_REFUSES:
        refusal = TEMPLATE_REFUSES[family.name, case]
        with pytest.raises(Exception, match=refusal):
            hf.apply_chat_template(messages, tools=tools, tokenize=False)
        with pytest.raises(ValueError, match=f"chat template: {refusal}"):
            encode_row(load_hf_tokenizer(folder), read_row({"messages": messages, "tools": tools}, "x:1"),
                       "assistant_only")
        return
    ids, mask = encode_row(load_hf_tokenizer(folder), read_row({"messages": messages, "tools": tools}, "x:1"),
                           "assistant_only")
    assert ids == list(hf.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False))
    assert mask == prefix_mask(hf, messages, tools)
    assert sum(mask) > 0


def test_generation_markers_equal_transformers_assistant_mask(base_tokenizer: str, tmp_path: Path) -> None:
    smollm = next(f for f in FAMILIES if f.name == "smollm")
    folder = write_folder(base_tokenizer, smollm, tmp_path / "marked", config_template=MARKED)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    tok = load_hf_tokenizer(folder)
    for messages, _ in CONVERSATIONS.values():
        messages = [m for m in messages if "tool_calls" not in m and m["role"] != "tool"]
        ref = hf.apply_chat_template(messages, tokenize=True, return_dict=True,
                                     return_assistant_tokens_mask=True)
        ids, mask = encode_row(tok, read_row({"messages": messages}, "x:1"), "assistant_only")
        assert ids == list(ref["input_ids"])
        assert mask == list(ref["assistant_masks"]) and sum(mask) > 0


# Phi-3.5-mini's shipped template with {% generation %} around each reply and its <|end|>\n: the same text
MARKED_PHI = ("{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
              "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
              "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
              "{{'<|assistant|>\n'}}{% generation %}{{ message['content'] + '<|end|>\n'}}{% endgeneration %}"
              "{% endif %}{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}")


def test_phi_turns_equal_its_marked_templates_mask(base_tokenizer: str, tmp_path: Path) -> None:
    """Phi-3.5's eos_token after the last message is no earlier turn's: the shipped template's turns found
    from prefixes equal return_assistant_tokens_mask of the same template with {% generation %} markers,
    but for that final eos_token, which the prefix rule gives the last turn (its text ends the chat) and
    the markers leave out."""
    phi = next(f for f in FAMILIES if f.name == "phi3")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, phi, tmp_path / "phi"))
    marked = transformers.AutoTokenizer.from_pretrained(
        str(write_folder(base_tokenizer, phi, tmp_path / "marked", config_template=MARKED_PHI)))
    for messages, _ in CONVERSATIONS.values():
        ref = marked.apply_chat_template(messages, tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)
        ids, mask = encode_row(tok, read_row({"messages": messages}, "x:1"), "assistant_only")
        assert ids == list(ref["input_ids"]) and ids[-1] == tok.eos_id
        assert mask[:-1] == list(ref["assistant_masks"])[:-1] and sum(mask) > 1
        assert (mask[-1], ref["assistant_masks"][-1]) == (1, 0)


def test_last_turn_all_and_completion_masks(base_tokenizer: str, tmp_path: Path) -> None:
    qwen = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, qwen, tmp_path / "q"))
    messages = CONVERSATIONS["multi_turn"][0]
    row = read_row({"messages": messages}, "x:1")
    _, every = encode_row(tok, row, "assistant_only")
    ids, last = encode_row(tok, row, "last_turn")
    assert 0 < sum(last) < sum(every)
    assert tok.decode([i for i, m in zip(ids, last, strict=True) if m]) == "No jokes.\n"
    assert set(encode_row(tok, row, "all")[1]) == {1}
    split = read_row({"prompt": messages[:3], "completion": messages[3:]}, "x:2")
    ids, mask = encode_row(tok, split, "auto")  # completion_only
    assert mask == last
    text = read_row({"prompt": "2+2=", "completion": "4"}, "x:3")
    ids, mask = encode_row(tok, text, "auto")
    assert ids[-1] == tok.eos_id and tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == "4"


def test_template_that_rewrites_earlier_turns_is_refused(base_tokenizer: str, tmp_path: Path) -> None:
    nemo = next(f for f in FAMILIES if f.name == "mistral-nemo")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, nemo, tmp_path / "n"))
    row = read_row({"messages": CONVERSATIONS["system"][0]}, "chats.jsonl:7")
    with pytest.raises(ValueError, match=r"chats.jsonl:7: the chat template cannot mark the assistant"):
        encode_row(tok, row, "assistant_only")


@pytest.mark.parametrize("row, message", [
    ({"messages": [{"role": "user", "content": "Hi"}]}, "a conversation without an assistant turn"),
    ({"messages": [{"role": "assistant", "content": "Hi"}]}, "roles out of order: messages.0. is assistant"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"},
                   {"role": "assistant", "content": "c"}]}, "roles out of order: messages.1. is a system"),
    ({"prompt": "2+2=", "completion": ""}, "empty completion"),
    ({"prompt": "2+2=", "completion": [{"role": "assistant", "content": "4"}]},
     "prompt and completion must both be text or both"),
    ({"question": "2+2", "answer": "4"}, r"a row of no known format \(fields \['answer', 'question'\]\)"),
])
def test_bad_rows_name_file_and_line(row: dict, message: str, tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]}
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"chats.jsonl:3: {message}"):
        list(read_jsonl(path))


def test_mask_that_does_not_fit_the_format_is_refused(base_tokenizer: str, tmp_path: Path) -> None:
    qwen = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, qwen, tmp_path / "q"))
    with pytest.raises(ValueError, match=r"x:1: data.loss_mask=assistant_only applies to conversation "
                                         r"rows, this row is text; allowed for it: auto\|all"):
        encode_row(tok, read_row({"text": "plain"}, "x:1"), "assistant_only")


def test_unknown_loss_mask_is_named(tmp_path: Path) -> None:
    from zoo.data.sources.chat import load_chat

    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps({"messages": CONVERSATIONS["system"][0]}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="data.loss_mask: Unknown loss mask 'assistant'. Did you mean "
                                         "'assistant_only'?"):
        load_chat(path=str(path), loss_mask="assistant")


THINK_CALL = {**CALL, "reasoning_content": "I should look it up."}
REASONING = {
    "single_turn": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                     {"role": "assistant", "content": "4.", "reasoning_content": "Two and two make four."}],
                    None),
    "tools": ([{"role": "user", "content": "Weather in Paris?"}, THINK_CALL,
               {"role": "tool", "content": "22 C", "tool_call_id": "call00001"},
               {"role": "assistant", "content": "It is 22 C.", "reasoning_content": "The tool said 22 C."}],
              TOOLS),
}


@pytest.mark.parametrize("case", list(REASONING))
def test_reasoning_content_reaches_the_template(case: str, base_tokenizer: str, tmp_path: Path) -> None:
    """Qwen3 writes an assistant turn's reasoning_content as <think>...</think>, trained with the turn."""
    qwen3 = next(f for f in FAMILIES if f.name == "qwen3")
    folder = write_folder(base_tokenizer, qwen3, tmp_path / "qwen3")
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    messages, tools = REASONING[case]
    tok = load_hf_tokenizer(folder)
    ids, mask = encode_row(tok, read_row({"messages": messages, "tools": tools}, "x:1"), "assistant_only")
    assert ids == list(hf.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False))
    assert mask == prefix_mask(hf, messages, tools)
    trained = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    for m in messages:
        if "reasoning_content" in m:
            assert m["reasoning_content"] in trained


def test_reasoning_dropped_from_earlier_turns_is_refused(base_tokenizer: str, tmp_path: Path) -> None:
    """Qwen3 keeps reasoning (and an empty think block) only after the last user query: an earlier turn
    renders differently alone, so two assistant turns with a user turn between are refused."""
    qwen3 = next(f for f in FAMILIES if f.name == "qwen3")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, qwen3, tmp_path / "qwen3"))
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello.", "reasoning_content": "Greet back."},
                {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye."}]
    for turns in (messages, CONVERSATIONS["multi_turn"][0]):  # no reasoning: an empty think block, last only
        for mask in ("assistant_only", "last_turn"):
            with pytest.raises(ValueError, match=r"chats.jsonl:2: the chat template cannot mark the "):
                encode_row(tok, read_row({"messages": turns}, "chats.jsonl:2"), mask)


@pytest.mark.parametrize("value", [["step 1"], 3, {"text": "x"}])
def test_reasoning_content_that_is_not_text_is_refused(value: object) -> None:
    """Qwen3's template reads reasoning_content only when it is a string: anything else would be dropped."""
    messages = [{"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4.", "reasoning_content": value}]
    with pytest.raises(ValueError, match=r"chats.jsonl:4: messages\[1\].reasoning_content must be text"):
        read_row({"messages": messages}, "chats.jsonl:4")


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_data_hf_rows_read_as_data_chat(tmp_path: Path) -> None:
    """data=hf (a file datasets reads) gives task=sft the rows data=chat reads from the same JSONL, each
    format by its fields, Arrow's null fields read as absent."""
    pytest.importorskip("datasets")
    from zoo.data.sources.chat import load_chat
    from zoo.data.sources.hf import load_hf

    path = _jsonl(tmp_path / "chats.jsonl", [
        {"messages": CONVERSATIONS["system"][0]}, {"messages": CONVERSATIONS["tools"][0], "tools": TOOLS},
        {"messages": REASONING["single_turn"][0]}, {"prompt": "2+2=", "completion": "4"}, {"text": "plain"}])
    hf = load_hf(path=str(path), kind="chat", whole=True)
    chat = load_chat(path=str(path), whole=True)
    assert [r.content() for r in hf.train] == [r.content() for r in chat.train]
    assert [r.format for r in hf.train] == ["conversation"] * 3 + ["prompt_completion", "text"]
    assert hf.train[1].where.endswith(":2") and hf.loss_mask == "auto"
    held = load_hf(path=str(path), kind="chat", val_fraction=0.4, seed=1)
    assert sorted(r.content() for r in held.train + held.val) == sorted(r.content() for r in chat.train)


def test_data_hf_bad_chat_rows_are_named(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from zoo.data.sources.hf import load_hf

    good = {"messages": CONVERSATIONS["system"][0]}
    path = _jsonl(tmp_path / "chats.jsonl", [good, {"messages": [{"role": "user", "content": "Hi"}]}])
    with pytest.raises(ValueError, match=r"split 'train' of .*chats.jsonl.*:2: a conversation without an "
                                         r"assistant turn"):
        load_hf(path=str(path), kind="chat", whole=True)
    ok = str(_jsonl(tmp_path / "ok.jsonl", [good]))
    with pytest.raises(ValueError, match="data.loss_mask: Unknown loss mask 'assistant'"):
        load_hf(path=ok, kind="chat", loss_mask="assistant")
    with pytest.raises(ValueError, match=r"ok.jsonl'\]:1: data.loss_mask=completion_only applies to "
                                         r"prompt_completion"):
        load_hf(path=ok, kind="chat", loss_mask="completion_only", whole=True)
