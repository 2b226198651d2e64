"""Preference data and scoring: trl's row formats read from JSONL (the implicit prompt cut as trl's
extract_prompt cuts it), each bad row one error naming file:line, completion log-probs summed over the
completion tokens only (by hand), and the LoRA-off reference equal to the base model."""

from __future__ import annotations

import json
import math

import pytest
import torch

import zoo
from zoo.data.preference import PreferenceRow, implicit_prompt, read_preference_jsonl
from zoo.tasks.preference import adapters_off, collate_pairs, completion_logps, encode_pair, pair_logps


def write(tmp_path, rows) -> str:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_reads_explicit_and_implicit_prompts(tmp_path):
    path = write(tmp_path, [{"prompt": "Q: ", "chosen": "yes", "rejected": "no"}, "",
                            {"chosen": "the sky is blue", "rejected": "the sky is green"}])
    assert read_preference_jsonl(path) == [PreferenceRow("Q: ", "yes", "no"),
                                           PreferenceRow("the sky is", " blue", " green")]


@pytest.mark.parametrize(("chosen", "rejected"), [
    ("the sky is blue", "the sky is green"), ("ab", "ac"), ("same start x", "same start y z"),
    ("a b", "a  c"), ("same", "same more")])  # a prefix of the other: trl keeps the last character in both
def test_implicit_prompt_is_trls(chosen, rejected):
    from trl import extract_prompt

    expected = extract_prompt({"chosen": chosen, "rejected": rejected})
    assert implicit_prompt(chosen, rejected) == (expected["prompt"], expected["chosen"], expected["rejected"])


@pytest.mark.parametrize(("row", "message"), [
    ({"prompt": "p", "chosen": "a", "rejected": "a"}, "chosen and rejected are the same text 'a'"),
    ({"prompt": "p", "chosen": "", "rejected": "b"}, "the chosen completion is empty"),
    ({"chosen": "", "rejected": "x"}, "the chosen completion is empty once the common prefix"),
    ({"text": "hello"}, r"needs the fields prompt/chosen/rejected or chosen/rejected \(implicit prompt\); "
                        r"got \['text'\]"),
    ({"prompt": "p", "chosen": "a", "rejected": "b", "score": 1}, r"unknown field\(s\) \['score'\]"),
    ({"prompt": "p", "chosen": 3, "rejected": "b"},
     "field 'chosen' must be text or a list of messages, got int"),
    ({"chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]},
     "a conversational pair needs a prompt"),  # the messages read: tests/tasks/test_dpo_messages.py
    ("{not json", "not JSON"),
    ("[1, 2]", "got list"),
])
def test_bad_row_is_one_error_naming_file_and_line(tmp_path, row, message):
    path = write(tmp_path, [{"prompt": "p", "chosen": "a", "rejected": "b"}, row])
    with pytest.raises(ValueError, match=f"^{path}:2: .*{message}"):
        read_preference_jsonl(path)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="data.path="):
        read_preference_jsonl(tmp_path / "none.jsonl")
    with pytest.raises(ValueError, match="no preference rows"):
        read_preference_jsonl(write(tmp_path, [""]))


def test_encode_and_collate_by_hand():
    """Token merges across the prompt boundary move the completion start back (trl's rule)."""
    vocab = {"ab": 7}  # "a" + "b" merge into one token when written together
    encode = lambda text: [vocab.get(text[i:i + 2], ord(text[i])) for i in range(0, len(text), 2)] \
        if text == "ab" else [ord(c) for c in text]  # noqa: E731
    pair = encode_pair(PreferenceRow("xa", "b", "c"), lambda t: [7] if t == "ab" else encode(t), eos_id=1)
    assert (pair.prompt, pair.chosen, pair.rejected) == ([ord("x"), ord("a")], [ord("b"), 1], [ord("c"), 1])
    batch = collate_pairs([pair, encode_pair(PreferenceRow("q", "rs", "t"), encode, 1)], pad_id=0)
    assert batch["input_ids"].tolist() == [[120, 97, 98, 1], [113, 114, 115, 1], [120, 97, 99, 1],
                                           [113, 116, 1, 0]]
    assert batch["completion_mask"].tolist() == [[0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]]


def test_completion_logps_sum_completion_tokens_only():
    """Uniform logits over V=4: each completion token costs ln 4; prompt and padding cost nothing."""
    batch = {"input_ids": torch.tensor([[1, 2, 3, 0], [1, 3, 0, 0]]),
             "completion_mask": torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0]])}
    logps, tokens = completion_logps(torch.zeros(2, 4, 4), batch)
    torch.testing.assert_close(logps, torch.tensor([-2 * math.log(4), -math.log(4)]))
    assert tokens.tolist() == [2, 1]


def tiny():
    return zoo.build("gpt_nano", vocab_size=40, max_seq_len=16, d_model=16, n_layers=1, n_heads=2)


def test_lora_off_reference_is_the_base_model():
    from zoo.finetune.lora import add_lora

    torch.manual_seed(0)
    model = tiny().eval()
    encode = lambda t: [ord(c) - 90 for c in t]  # noqa: E731
    batch = collate_pairs([encode_pair(PreferenceRow("abc", "d", "ef"), encode, 1)], pad_id=0)
    base = pair_logps(model, model, batch)
    add_lora(model, rank=2, alpha=4.0, dropout=0.0, targets=["self_attn.qkv", "ffn.up"])
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p)  # adapters that change the outputs
    pairs = pair_logps(model, None, batch)
    torch.testing.assert_close(pairs.ref_chosen, base.chosen)  # the reference: adapters off
    torch.testing.assert_close(pairs.ref_rejected, base.rejected)
    assert not torch.allclose(pairs.chosen, base.chosen)  # the policy: adapters on
    with adapters_off(model):
        pass
    torch.testing.assert_close(pair_logps(model, None, batch).chosen, pairs.chosen)  # restored after


def test_lora_off_reference_needs_adapters():
    batch = collate_pairs([encode_pair(PreferenceRow("ab", "c", "d"), lambda t: [ord(c) - 90 for c in t], 1)],
                          pad_id=0)
    with pytest.raises(ValueError, match="LoRA adapters off, but it has none"):
        pair_logps(tiny(), None, batch)
