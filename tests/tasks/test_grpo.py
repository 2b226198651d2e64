"""task=grpo wired into train.py: the issue's command line trains a tiny decoder on prompts with zoo's own
sampled rollouts and logs trl's reward, completion-length and clip metrics; bad input (no reward, a reward
that does not import, num_generations 1 with std scaling, an encoder, a prompt that leaves no room for the
completion, a row without the field a reward reads, a prompt file row without a prompt) is one clear error
before any step."""

from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zoo.apps import ConfigError
from zoo.data.prompts import parse_prompt_row
from zoo.finetune.lora import LoRALinear, add_lora
from zoo.models import build_model
from zoo.tasks import build_data
from zoo.tasks.grpo_batch import completion_logps
from zoo.training.plan import prepare

from .conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]


def write_prompts(path: Path, rows: list[dict] | None = None) -> Path:
    rows = rows or [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(5) for b in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def grpo_cfg(make_cfg, tmp_path, *extra: str, rows: list[dict] | None = None):
    path = write_prompts(tmp_path / "p.jsonl", rows)
    return make_cfg([*TINY_MODEL, "task=grpo", "data=prompts", f"data.path={path}", "grpo.num_generations=2",
                     "grpo.max_completion_length=4", *extra])


@pytest.mark.parametrize(("extra", "message"), [
    ([], r"grpo.rewards is empty"),
    (["grpo.rewards=[no_such_module_zz:f]"], r"cannot import module 'no_such_module_zz'"),
    (["grpo.rewards=[answer_match]", "grpo.num_generations=1"],
     r"grpo.num_generations=1 with grpo.scale_rewards=group: a group of one completion has no std"),
    (["grpo.rewards=[answer_match]", "grpo.loss_type=ppo"], r"grpo.loss_type: .*dapo"),
    (["grpo.rewards=[answer_match]", "+grpo.epsilon_hi=0.3"], r"Did you mean 'grpo.epsilon_high'"),
    (["grpo.rewards=[answer_match]", "model=bert_small"], r"task=grpo needs model.arch in \['decoder'\]"),
])
def test_bad_settings_are_one_error_before_any_data_is_read(make_cfg, tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        prepare(grpo_cfg(make_cfg, tmp_path, *extra))


def test_grpo_keys_are_refused_for_another_task(make_cfg):
    with pytest.raises(ConfigError, match=r"grpo\.\* applies to task=grpo only, not task=lm"):
        prepare(make_cfg([*TINY_MODEL, "task=lm", "grpo.num_generations=4"]))


def bound(make_cfg, tmp_path, *extra, rows=None):
    plan = prepare(grpo_cfg(make_cfg, tmp_path, "grpo.rewards=[answer_match]", *extra, rows=rows))
    tokenizer, datamodule = build_data(plan.data_cfg, plan.tokenizer_cfg, task=plan.task,
                                       max_seq_len=plan.model.max_seq_len, batch_size=2,
                                       cache_dir=tmp_path / "cache", seed=0)
    model = build_model(plan.task.model_config(plan.model, tokenizer))
    return plan.task.for_model(model, plan.resolved["grpo"]), datamodule


def test_a_prompt_that_leaves_no_room_for_the_completion_is_refused_before_the_first_step(make_cfg, tmp_path):
    """model.max_seq_len=32: a 30-character prompt + 4 completion tokens does not fit."""
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "9" * 30 + "=", "answer": "9"}] * 3
    run, datamodule = bound(make_cfg, tmp_path, "tokenizer=char", rows=rows)
    with pytest.raises(ValueError, match=r"prompt \d+ has \d+ tokens; with grpo.max_completion_length=4 it "
                                         r"needs \d+ > model.max_seq_len=32"):
        run.before_fit(datamodule, resuming=False)


def test_a_row_without_the_field_a_reward_reads_is_refused_before_the_first_step(make_cfg, tmp_path):
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "solution": "4"}] * 3
    run, datamodule = bound(make_cfg, tmp_path, rows=rows)
    with pytest.raises(ValueError, match=r"reward answer_match reads field 'answer', which \w+ row \d+"):
        run.before_fit(datamodule, resuming=False)


def test_the_reference_is_the_model_with_its_adapters_off_or_a_frozen_copy(make_cfg, tmp_path):
    """grpo.beta > 0: with LoRA adapters (their B made nonzero, so the policy differs) the reference
    log-probs of the sampled completions equal the base model's and the run holds no second model; without
    LoRA the reference is a frozen copy. Each rollout's advantages sum to 0 within a group."""
    plan = prepare(grpo_cfg(make_cfg, tmp_path, "grpo.rewards=[answer_match]", "grpo.beta=0.1",
                            "tokenizer=char"))
    tokenizer, datamodule = build_data(plan.data_cfg, plan.tokenizer_cfg, task=plan.task,
                                       max_seq_len=plan.model.max_seq_len, batch_size=2,
                                       cache_dir=tmp_path / "cache", seed=0)
    torch.manual_seed(0)
    model = build_model(plan.task.model_config(plan.model, tokenizer))
    full = plan.task.for_model(model, plan.resolved["grpo"])
    assert full.reference is not None and not any(p.requires_grad for p in full.reference.parameters())
    base = copy.deepcopy(model).eval()
    add_lora(model, rank=2, alpha=4.0, dropout=0.0, targets=["self_attn.qkv", "self_attn.o"])
    for layer in model.modules():
        if isinstance(layer, LoRALinear):
            torch.nn.init.normal_(layer.lora_B, std=0.5)
    run = plan.task.for_model(model, plan.resolved["grpo"])
    assert run.reference is None
    run.before_fit(datamodule, resuming=False)
    model.train()
    rollout = run.prepare_batch(next(iter(datamodule.train_dataloader())), 0, training=True)["rollout"]
    assert model.training  # generation and the reference ran in eval mode; the mode is back
    mask = rollout.completion_mask.float()
    with torch.no_grad():
        expected = completion_logps(base, rollout)[0] * mask
        policy = completion_logps(model.eval(), rollout)[0] * mask
    torch.testing.assert_close(rollout.ref_logps * mask, expected, rtol=0, atol=1e-5)
    assert not torch.allclose(policy, expected, atol=1e-3)  # the adapters are on again for the policy
    torch.testing.assert_close(rollout.advantages.view(-1, 2).sum(1), torch.zeros(2), rtol=0, atol=1e-5)


@pytest.mark.parametrize(("row", "message"), [
    ({"question": "1+1="}, r"f.jsonl:3: a prompt row needs the field 'prompt'"),
    ({"prompt": ""}, r"field 'prompt' must be non-empty text"),
    ({"prompt": "x", "completions": 1}, r"field 'completions' is a name the reward functions are called"),
    ({"prompt": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
     r"the prompt ends with an assistant turn"),
])
def test_bad_prompt_rows_name_their_line(row, message):
    with pytest.raises(ValueError, match=message):
        parse_prompt_row(row, "f.jsonl:3")


@pytest.mark.e2e  # a train.py subprocess: ~15 s
def test_train_py_grpo_logs_the_reward_metrics(tmp_path: Path) -> None:
    """The issue's command line on a tiny decoder from scratch (char tokenizer): rollouts sampled, scored by
    answer_match, two optimisation steps per generation batch; trl's metrics are logged on train and the
    reward on validation, and the second step on a batch runs off the sampling policy (loss no longer the
    ratio-1 value)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "task=grpo", "model=gpt_nano", "model.max_seq_len=32",
         "tokenizer=char", "data=prompts", f"data.path={write_prompts(tmp_path / 'prompts.jsonl')}",
         "grpo.rewards=[answer_match]", "grpo.num_generations=4", "grpo.max_completion_length=4",
         "grpo.num_iterations=2", "grpo.beta=0.04", "optim.lr=1e-2",
         "trainer.max_steps=4", "eval_every=4", "batch_size=2", "logger=csv", "trainer.log_every_n_steps=1",
         "callbacks.samples.max_new_tokens=4", "callbacks.samples.num_shown=1",
         f"paths.output_dir={tmp_path / 'run'}", f"paths.runs_dir={tmp_path / 'runs'}",
         f"paths.cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "run" / "csv" / "metrics.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    logged = {key for row in rows for key, value in row.items() if value}
    names = ("reward", "reward_std", "rewards/answer_match/mean", "rewards/answer_match/std",
             "frac_reward_zero_std", "completions/mean_length", "completions/min_length",
             "completions/max_length", "completions/clipped_ratio", "kl", "entropy", "clip_ratio/region_mean",
             "time/generation_s", "rollout_tokens_per_s")
    assert {"train/loss", *(f"train/{n}" for n in names), "val/reward",
            "val/rewards/answer_match/mean"} <= logged
    train = [row for row in rows if row.get("train/loss")]
    assert [int(r["step"]) for r in train] == [0, 1, 2, 3]
    assert float(train[1]["train/time/generation_s"]) == 0.0  # the batch of step 0, reused
    assert float(train[0]["train/time/generation_s"]) > 0.0 and float(train[2]["train/time/generation_s"]) > 0
    assert train[0]["train/reward"] == train[1]["train/reward"]  # the same rollouts
    assert 0.0 <= float(train[0]["train/reward"]) <= 1.0
    assert float(train[0]["train/kl"]) == 0.0  # the policy is the reference before its first step


@pytest.mark.parametrize("family", ["qwen2.5", "llama3", "gemma3"])
def test_conversational_prompts_are_rendered_as_transformers_renders_them(tmp_path, family):
    """A prompt of messages is its chat template's rendering with the generation prompt, the ids equal to
    transformers' apply_chat_template (what trl's GRPOTrainer tokenises); a text prompt is encoded as is."""
    transformers = pytest.importorskip("transformers")
    from tests.tokenizers import test_chat
    from tests.tokenizers.chat_templates import FAMILIES
    from tests.tokenizers.test_chat import write_folder
    from zoo.data.prompts import encode_prompt
    from zoo.tokenizers import load_hf_tokenizer

    spec = next(f for f in FAMILIES if f.name == family)
    folder = write_folder(test_chat.base_tokenizer.__wrapped__(), spec, tmp_path / "tok")
    tokenizer, hf = load_hf_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "What is 2+3?"}]
    row = parse_prompt_row({"prompt": messages, "answer": "5"}, "p.jsonl:1")
    expected = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
    assert encode_prompt(row, tokenizer) == list(expected)
    assert row.fields == {"answer": "5"}
    text = parse_prompt_row({"prompt": "What is 2+3?"}, "p.jsonl:2")
    assert encode_prompt(text, tokenizer) == tokenizer.encode("What is 2+3?")
