"""task=grpo rollouts stop where a chat model stops: at the chat template's end-of-turn token (Gemma's
<end_of_turn> is not its eos) and at grpo.stop_strings; the completion is cut there, the reward sees the cut
text, and completions/clipped_ratio counts only completions that ran to grpo.max_completion_length. What a
run reports about its rollouts: train/tokens_per_s counts them, the rollouts callback logs them as a table."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import zoo
from tests.tasks import grpo_user_rewards
from zoo.data.prompts import turn_end_id
from zoo.tasks.grpo import GRPORun, grpo_settings
from zoo.tasks.grpo_batch import cut_completion, cut_text
from zoo.tasks.rewards import build_rewards

from .test_grpo import bound, grpo_cfg

TURN_ENDS = {"qwen2.5": "<|im_end|>", "llama3": "<|eot_id|>", "gemma3": "<end_of_turn>"}


def chat_tokenizer(tmp_path, family: str):
    from tests.tokenizers import test_chat
    from tests.tokenizers.chat_templates import FAMILIES
    from zoo.tokenizers import load_hf_tokenizer

    spec = next(f for f in FAMILIES if f.name == family)
    return load_hf_tokenizer(test_chat.write_folder(test_chat.base_tokenizer.__wrapped__(), spec, tmp_path))


@pytest.mark.parametrize("family", sorted(TURN_ENDS))
def test_the_turn_end_is_the_special_token_the_template_closes_a_reply_with(tmp_path, family):
    tokenizer = chat_tokenizer(tmp_path, family)
    assert turn_end_id(tokenizer) == tokenizer.hf.token_to_id(TURN_ENDS[family])


def test_cut_completion_stops_at_the_first_stop_token_or_stop_string():
    decode = lambda ids: "".join(chr(ord("a") + i) for i in ids)  # noqa: E731
    assert cut_completion([0, 1, 9, 2, 9], {9}) == ([0, 1, 9], False)
    assert cut_completion([0, 1, 2, 3], {9}) == ([0, 1, 2, 3], True)
    assert cut_completion([0, 1, 2, 3, 9], {9}, ["bc"], decode) == ([0, 1, 2], False)
    assert cut_text("xy</a>zz</a>", ["</a>", "zz"]) == "xy</a>"


class Scripted(torch.nn.Module):
    """A decoder that replies `script` to every prompt whatever it is asked to stop at, except the stop tokens
    it is given (eos_token_id): a row ends there and is padded, as zoo's generate pads a finished row."""

    def __init__(self, model, script: list[int]) -> None:
        super().__init__()
        self.inner, self.script, self.config = model, script, model.config
        self.asked: list[dict] = []

    def forward(self, **kwargs):
        return self.inner(**kwargs)

    def generate(self, ids, **options):
        self.asked.append(options)
        ids = ids.repeat_interleave(options.get("num_return_sequences", 1), 0)  # as generate's copies
        stops = options.get("eos_token_id") or [self.config.eos_id]
        stops = [stops] if isinstance(stops, int) else stops
        row, done = [], False
        for token in self.script[:options["max_new_tokens"]]:
            row.append(self.config.pad_id if done else token)
            done = done or token in stops
        return torch.cat([ids, torch.tensor([row] * ids.shape[0])], 1)


def test_a_chat_rollout_ends_at_the_templates_end_of_turn_not_only_at_eos(tmp_path):
    """Gemma 3: the reply 'Hi there<end_of_turn>' then more text; the completion is cut after <end_of_turn>,
    the reward reads 'Hi there', and no completion counts as clipped. Before: the row ran on to the token cap
    (clipped_ratio 1, the reward read the text after the turn)."""
    tokenizer = chat_tokenizer(tmp_path, "gemma3")
    end = tokenizer.hf.token_to_id("<end_of_turn>")
    assert end != tokenizer.eos_id
    reply, after = tokenizer.encode("Hi there"), tokenizer.encode(" more words")
    torch.manual_seed(0)
    inner = zoo.build("gpt_nano", vocab_size=tokenizer.vocab_size, max_seq_len=64, eos_id=tokenizer.eos_id,
                      pad_id=tokenizer.padding_id, bos_id=tokenizer.bos_id)
    model = Scripted(inner, [*reply, end, *after])
    settings = grpo_settings({"rewards": ["tests.tasks.grpo_user_rewards:record"], "num_generations": 2,
                              "max_completion_length": len(reply) + 1 + len(after)})
    run = GRPORun(model, None, settings, build_rewards(settings.rewards, settings.reward_weights))
    run.data = SimpleNamespace(tokenizer=tokenizer, fields=lambda split, index: [{} for _ in index],
                               conversational=lambda split, index: [True for _ in index])
    prompt = torch.tensor([tokenizer.chat_ids([{"role": "user", "content": "Hi"}])])
    grpo_user_rewards.SEEN.clear()
    rollout, logged = run._generate({"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt),
                                     "index": torch.tensor([0])}, 0, "train")
    assert rollout.completion_ids.tolist() == [[*reply, end]] * 2
    assert rollout.completion_mask.tolist() == [[1] * (len(reply) + 1)] * 2
    assert grpo_user_rewards.SEEN[0][0] == ["Hi there"] * 2
    assert float(logged["completions/clipped_ratio"]) == 0.0
    assert float(logged["completions/mean_length"]) == len(reply) + 1
    assert end in model.asked[0]["eos_token_id"] and tokenizer.eos_id in model.asked[0]["eos_token_id"]


def test_stop_strings_end_rollouts_and_only_capped_completions_count_as_clipped(make_cfg, tmp_path):
    """A tiny char-level decoder samples 10 tokens per completion with "3" and "7" as stop strings: a
    completion that contains one ends at it (its ids through the stop, its text for the reward ending with
    it, no stop earlier); the others ran to the cap, and clipped_ratio is their share."""
    stops = ["3", "7"]
    run, datamodule = bound(make_cfg, tmp_path, "tokenizer=char", "grpo.num_generations=8",
                            "grpo.max_completion_length=10", "grpo.stop_strings=['3','7']",
                            "grpo.rewards=[tests.tasks.grpo_user_rewards:record]")
    run.before_fit(datamodule, resuming=False)
    grpo_user_rewards.SEEN.clear()
    torch.manual_seed(0)
    rollout = run.prepare_batch(next(iter(datamodule.train_dataloader())), 0, training=True)["rollout"]
    texts, ids = grpo_user_rewards.SEEN[0]
    eos, capped, stopped = run.stop_ids(), 0, 0
    for text, row in zip(texts, ids, strict=True):
        if row[-1] in eos:  # the model's own eos (the char tokenizer has no chat turn end of its own)
            assert not any(s in text for s in stops) and len(row) <= 10
        elif any(s in text for s in stops):
            stopped += 1
            assert text[-1] in stops and not any(s in text[:-1] for s in stops), (text, row)
        else:
            capped += 1
            assert len(row) == 10, (text, row)
    assert capped and stopped  # both kinds occur
    assert rollout.completion_mask.sum(1).tolist() == [len(r) for r in ids]
    assert float(run.logged["completions/clipped_ratio"]) == pytest.approx(capped / len(texts))


def test_tokens_per_s_counts_the_rollout_tokens_each_step_trained_on(make_cfg, tmp_path, monkeypatch):
    """train/tokens_per_s of task=grpo counts each step's prompt + completion tokens (the prompt batch the
    loader gives has no input_ids: it read 0 before)."""
    from tests.training.conftest import read_csv_metrics
    from zoo.training.module import ZooLightningModule
    from zoo.training.run import train

    seen: list[tuple[int, int]] = []

    def record(self, outputs, batch, batch_idx):
        rollout = self.task._rollout[0]
        trained = rollout.prompt_mask.sum() + rollout.completion_mask.sum()
        seen.append((int(self.trained_tokens), int(trained)))

    monkeypatch.setattr(ZooLightningModule, "on_train_batch_end", record, raising=False)
    cfg = grpo_cfg(make_cfg, tmp_path, "tokenizer=char", "grpo.rewards=[answer_match]", "trainer.max_steps=3",
                   "eval_every=100", "logger=csv", "trainer.log_every_n_steps=1", "callbacks.samples=null",
                   "callbacks.tokens_per_s.window=1", "grpo.num_iterations=2")
    run_dir = train(cfg).output_dir
    assert len(seen) == 3 and all(counted == expected > 0 for counted, expected in seen), seen
    rates = [float(r["train/tokens_per_s"]) for r in read_csv_metrics(run_dir) if r.get("train/tokens_per_s")]
    assert rates and all(rate > 0 for rate in rates), rates


@pytest.mark.e2e  # a train.py subprocess with W&B offline: ~15 s
def test_rollouts_are_logged_to_wandb_as_a_table_every_n_steps(tmp_path):
    """callbacks.rollouts.every_n_steps=2 over 4 steps: a `rollouts` table after steps 2 and 4 in the offline
    W&B run (train.py in a subprocess: its exit flushes the run file), its columns the prompt, the completion
    and each reward function's value, its rows those of the generation batch the step trained on
    (answer_match is 1 exactly where the completion's last number is the row's answer)."""
    import glob
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.training.wandb_reader import history

    from .test_grpo import ROOT, write_prompts

    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "task=grpo", "model=gpt_nano", "model.max_seq_len=32",
         "tokenizer=char", "data=prompts", f"data.path={write_prompts(tmp_path / 'p.jsonl')}",
         "grpo.rewards=[answer_match,length_penalty]", "grpo.num_generations=2",
         "grpo.max_completion_length=4", "batch_size=4", "trainer.max_steps=4", "eval_every=100",
         "logger=wandb", "callbacks.samples=null", "callbacks.rollouts.every_n_steps=2",
         "callbacks.rollouts.num_shown=3", f"paths.output_dir={run_dir}",
         f"paths.runs_dir={tmp_path / 'runs'}", f"paths.cache_dir={tmp_path / 'cache'}"],
        cwd=tmp_path, env={**os.environ, "WANDB_MODE": "offline"}, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [run_file] = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    tables = [row for row in history(Path(run_file)) if "rollouts/_type" in row]
    assert len(tables) == 2, tables
    steps = []
    for row in tables:
        assert row["rollouts/_type"] == "table-file" and row["rollouts/nrows"] == 3
        [path] = glob.glob(str(Path(run_file).parent / "files" / row["rollouts/path"]))
        table = json.loads(Path(path).read_text())
        assert table["columns"] == ["step", "prompt", "completion", "answer_match", "length_penalty",
                                    "reward", "advantage"]
        steps.append({r[0] for r in table["data"]})
        for _, prompt, completion, match, penalty, reward, _ in table["data"]:
            a, b = prompt.rstrip("=").split("+")
            numbers = "".join(c if c.isdigit() else " " for c in completion).split()
            assert match == float(bool(numbers) and int(numbers[-1]) == int(a) + int(b))
            assert reward == pytest.approx(match + penalty)
    assert steps == [{1}, {3}]  # the batches sampled at (0-based) steps 1 and 3: the 2nd and 4th step's
