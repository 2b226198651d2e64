"""The reward registry for task=grpo: the built-in rewards on worked examples (answer extraction by last
number and by \\boxed{}, the regex format check, DAPO's soft length penalty), a user's `module:function`
called as trl calls reward functions, weights, trl's reward metrics by hand, and the refusals (a reward that
raises, returns the wrong count or a NaN: one error naming the reward and the row)."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.tasks.rewards import REWARDS, boxed, build_rewards, last_number, reward_metrics, score, weighted

USER = "tests.tasks.grpo_user_rewards"


def run(entries, completions, answers=None, prompts=None, weights=None, **fields):
    rewards = build_rewards(entries, weights)
    prompts = prompts or ["q"] * len(completions)
    ids = [list(range(len(c))) for c in completions]
    given = {"answer": answers or ["0"] * len(completions), **fields}
    return rewards, score(rewards, prompts, completions, ids, given)


def test_registry_holds_the_builtins():
    assert REWARDS.names() == ["answer_match", "format", "length_penalty"]


@pytest.mark.parametrize(("text", "found"), [
    ("so 3 + 4 = 7.", "7"), ("total: 12,345 apples", "12345"), ("-2.5 then -3", "-3"), ("none", None),
    ("x=1.25", "1.25"),
])
def test_last_number(text, found):
    assert last_number(text) == found


@pytest.mark.parametrize(("text", "found"), [
    ("the answer is \\boxed{42}", "42"), ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("no box", None), ("\\boxed{unclosed", None),
])
def test_boxed(text, found):
    assert boxed(text) == found


def test_answer_match_last_number_and_boxed():
    completions = ["3+4 is 7", "I think 8", "7.0", "\\boxed{7} and then 9"]
    _, values = run(["answer_match"], completions, answers=["7", "7", 7, "7"])
    assert values[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]  # the last number of the fourth is 9
    _, values = run([{"name": "answer_match", "extract": "boxed"}], completions, answers=["7"] * 4)
    assert values[:, 0].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_answer_match_reads_the_field_it_is_given():
    rewards, values = run([{"name": "answer_match", "field": "solution"}], ["is 5", "is 6"],
                          solution=["5", "5"])
    assert rewards[0].fields == ("solution",) and values[:, 0].tolist() == [1.0, 0.0]


def test_conversational_completions_score_their_message():
    _, values = run(["answer_match"], [[{"role": "assistant", "content": "it is 7"}]], answers=["7"])
    assert values.tolist() == [[1.0]]


def test_format_is_a_full_regex_match():
    pattern = r"<think>.*</think>\s*<answer>.*</answer>"
    _, values = run([{"name": "format", "pattern": pattern}],
                    ["<think>a\nb</think> <answer>7</answer>", "<answer>7</answer>",
                     "<think></think><answer>1</answer>x"])
    assert values[:, 0].tolist() == [1.0, 0.0, 0.0]


def test_length_penalty_is_dapos_soft_overlong_punishment():
    """max 10, cache 4: free up to 6 tokens, then -(L - 6)/4, -1 from 10 on."""
    completions = ["a" * n for n in (3, 6, 7, 8, 10, 14)]
    _, values = run([{"name": "length_penalty", "max_tokens": 10, "cache": 4}], completions)
    assert values[:, 0].tolist() == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]


def test_user_function_called_as_trl_calls_it_and_weights():
    rewards, values = run(["answer_match", f"{USER}:length_bonus", f"{USER}:uses_difficulty"],
                          ["7", "8 8"], answers=["7", "7"], weights=[1.0, 2.0, -1.0], difficulty=[3, 5])
    assert [r.name for r in rewards] == ["answer_match", "length_bonus", "uses_difficulty"]
    torch.testing.assert_close(values, torch.tensor([[1.0, 0.1, 3.0], [0.0, 0.3, 5.0]]))
    torch.testing.assert_close(weighted(values, rewards), torch.tensor([1 + 0.2 - 3, 0.6 - 5]))


def test_reward_metrics_by_hand():
    """Two prompts x 2 generations, answer_match x1 + format x0.5."""
    rewards = build_rewards(["answer_match", {"name": "format", "pattern": "x"}], [1.0, 0.5])
    values = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    m = reward_metrics(values, rewards, 2)
    assert float(m["rewards/answer_match/mean"]) == 0.75
    assert float(m["rewards/answer_match/std"]) == pytest.approx(math.sqrt(0.25))  # Bessel: 0.75/3
    assert float(m["rewards/format/mean"]) == 0.5
    assert float(m["reward"]) == pytest.approx((1.5 + 0.5 + 1 + 1) / 4)
    assert float(m["frac_reward_zero_std"]) == 0.5  # the second group: 1 and 1


@pytest.mark.parametrize(("entries", "weights", "match"), [
    ([], None, "grpo.rewards is empty"),
    (["answer_match"], [1.0, 2.0], "2 values for 1 grpo.rewards"),
    (["answer_mach"], None, "neither a registered reward"),
    ([{"name": "answer_match", "extract": "first"}], None, "grpo.rewards.answer_match.extract must be one"),
    ([{"name": "answer_match", "extrac": "boxed"}], None, "Did you mean 'grpo.rewards.answer_match.extract'"),
    ([{"name": "format"}], None, "needs grpo.rewards.format.pattern"),
    ([{"name": "format", "pattern": "("}], None, "no regular expression"),
    ([{"name": "length_penalty", "max_tokens": 4, "cache": 8}], None, "cache=8 must be <= max_tokens=4"),
    (["no_such_module_zz:f"], None, "cannot import module 'no_such_module_zz'"),
    ([f"{USER}:missing"], None, "has no function 'missing'"),
    ([f"{USER}:NOT_A_FUNCTION"], None, "has no function 'NOT_A_FUNCTION'"),
    (["answer_match", "answer_match"], None, "answer_match more than once"),
    ([3], None, r"grpo.rewards\[0\] must be"),
])
def test_bad_reward_settings_are_one_clear_error(entries, weights, match):
    with pytest.raises(ValueError, match=match):
        build_rewards(entries, weights)


@pytest.mark.parametrize(("name", "match"), [
    ("raises_on_seven", r"reward raises_on_seven raised ZeroDivisionError: .* on row 2 \(prompt 'q2', "
                        r"completion 'a7'\)"),
    ("one_short", "reward one_short returned 2 values for 3 completions"),
    ("nan_on_second", r"reward nan_on_second returned nan for row 1 \(prompt 'q1'.*a finite number"),
])
def test_a_bad_reward_is_one_error_naming_it_and_the_row(name, match):
    with pytest.raises(ValueError, match=match):
        run([f"{USER}:{name}"], ["a1", "a2", "a7"], prompts=["q0", "q1", "q2"])
