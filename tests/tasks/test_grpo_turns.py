"""task=grpo stops a completion where its rollouts stop it, in the end-of-fit samples too: at eos, at
grpo.stop_strings, and (conversational prompts only) at the chat template's end-of-turn token; a text prompt
runs on past that token, since nothing in it opened a turn."""

from __future__ import annotations

from types import SimpleNamespace

import torch

import zoo
from zoo.data.prompts import parse_prompt_row
from zoo.data.sources.prompts import PromptCorpus
from zoo.tasks import TASKS
from zoo.tasks.grpo import GRPORun, grpo_settings
from zoo.tasks.rewards import build_rewards

from .test_grpo_stops import Scripted, chat_tokenizer

CHAT = {"prompt": [{"role": "user", "content": "Hi"}], "answer": "a"}
TEXT = {"prompt": "Hi", "answer": "b"}


def prompt_data(tokenizer, rows: list[dict]):
    """The rows (file order) as both splits of a prompts data module, encoded as data=prompts encodes them."""
    parsed = [parse_prompt_row(r, f"p.jsonl:{i + 1}") for i, r in enumerate(rows)]
    arrays, _ = PromptCorpus(parsed, parsed).encode(tokenizer)
    entry = SimpleNamespace(arrays=arrays, tokenizer=tokenizer)  # a cache entry as build_data reads it
    return TASKS.get("grpo").datamodule(entry, {}, batch_size=len(rows), max_seq_len=64, seed=0)


class Replies(Scripted):
    """Scripted that also takes a list of prompts (as generate does)."""

    def generate(self, ids, **options):
        return super().generate(torch.as_tensor(ids), **options)


def gemma_run(tmp_path, script_of, **grpo):
    """A GRPORun on Gemma 3's tokenizer (its <end_of_turn> is not its eos) whose model replies
    script_of(tokenizer, end_of_turn_id) whatever it is asked, up to the script's length."""
    tokenizer = chat_tokenizer(tmp_path, "gemma3")
    end = tokenizer.hf.token_to_id("<end_of_turn>")
    assert end != tokenizer.eos_id
    torch.manual_seed(0)
    inner = zoo.build("gpt_nano", vocab_size=tokenizer.vocab_size, max_seq_len=64, eos_id=tokenizer.eos_id,
                      pad_id=tokenizer.padding_id, bos_id=tokenizer.bos_id)
    script = script_of(tokenizer, end)
    model = Replies(inner, script)
    settings = grpo_settings({"rewards": ["tests.tasks.grpo_user_rewards:record"], "num_generations": 2,
                              "max_completion_length": len(script), **grpo})
    return GRPORun(model, None, settings, build_rewards(settings.rewards, settings.reward_weights)), tokenizer


SAMPLES = {"num_shown": 2, "max_new_tokens": 12, "temperature": 1.0, "top_k": 0, "seed": 0}


def test_samples_end_where_rollouts_end_at_the_turn_end_and_stop_strings(tmp_path):
    """The end-of-fit samples of a chat prompt stop at <end_of_turn> (the model is asked to stop there and
    the reply is cut after it), and a stop string cuts the text after it, as a rollout's is cut. Before: the
    samples asked generate for eos only and showed the text after the turn and after the stop string."""
    def script(tokenizer, end):
        return [*tokenizer.encode("Hi there"), end, *tokenizer.encode(" more words")]

    run, tokenizer = gemma_run(tmp_path, script)
    data = prompt_data(tokenizer, [CHAT])
    report = run.samples(run.model, tokenizer, data, SAMPLES)
    assert [s.output for s in report.samples] == ["Hi there"]
    end = tokenizer.hf.token_to_id("<end_of_turn>")
    assert end in run.model.asked[-1]["eos_token_id"]

    run, tokenizer = gemma_run(tmp_path, lambda tokenizer, end: tokenizer.encode("one two three four"),
                               stop_strings=["two"])
    report = run.samples(run.model, tokenizer, prompt_data(tokenizer, [TEXT]), SAMPLES)
    assert [s.output for s in report.samples] == ["one two"]
    assert run.model.asked[-1]["stop_strings"] == ["two"]


def test_the_turn_end_stops_only_conversational_rows_while_eos_and_stop_strings_stop_all(tmp_path):
    """A batch of one chat prompt and one text prompt on Gemma 3's tokenizer, the model replying 'Hi there
    <end_of_turn> more words': the prompt data records which row is a chat; the chat row's completions end
    at <end_of_turn>, the text row's run on past it to the token cap (its text was never a turn), and the
    samples do the same. Before: <end_of_turn> stopped the text row too."""
    def script(tokenizer, end):
        return [*tokenizer.encode("Hi there"), end, *tokenizer.encode(" more words")]

    run, tokenizer = gemma_run(tmp_path, script)
    end = tokenizer.hf.token_to_id("<end_of_turn>")
    data = prompt_data(tokenizer, [CHAT, TEXT])
    assert data.datasets["train"].conversational == [True, False]
    run.data = data
    reply = script(tokenizer, end)
    rollout, logged = run._generate(next(iter(data.val_dataloader())), 0, "val")
    assert rollout.completion_ids.tolist() == [[*reply[:reply.index(end) + 1], *[tokenizer.padding_id] * (
        len(reply) - reply.index(end) - 1)]] * 2 + [reply] * 2
    assert rollout.completion_mask.sum(1).tolist() == [reply.index(end) + 1] * 2 + [len(reply)] * 2
    assert float(logged["completions/clipped_ratio"]) == 0.5  # the text row's ran to the cap
    asked = {tuple(a["eos_token_id"]) for a in run.model.asked}
    assert asked == {(tokenizer.eos_id, end), (tokenizer.eos_id,)}

    report = run.samples(run.model, tokenizer, data, SAMPLES)
    assert report.samples[0].output == "Hi there"
    assert report.samples[1].output.startswith("Hi there") and report.samples[1].output.endswith("more words")


def test_each_prompt_is_run_once_for_its_group_and_the_rollouts_are_the_repeated_prompts_samples(
        make_cfg, tmp_path):
    """A batch of 2 prompts x 4 completions: the prefill runs 2 rows (each prompt once, its cache copied to
    its group: generate's num_return_sequences), and the completions are those of sampling the 8 repeated
    prompts with the same seed (what the rollouts sampled before; bench/bench_grpo_rollouts.py: same tokens,
    less prefill). Before: the prefill ran all 8 rows."""
    from .test_grpo import bound

    run, data = bound(make_cfg, tmp_path, "tokenizer=char", "grpo.num_generations=4",
                      "grpo.max_completion_length=6")
    run.before_fit(data, resuming=False)
    batch = next(iter(data.train_dataloader()))
    rows_run: list[int] = []
    hook = run.model.register_forward_pre_hook(  # generate's stepper passes the ids first, by position
        lambda module, args, kwargs: rows_run.append((args[0] if args else kwargs["input_ids"]).shape[0]),
        with_kwargs=True)
    try:
        rollout, _ = run._generate(batch, 0, "train")
    finally:
        hook.remove()
    assert rows_run[0] == 2 and len(rollout) == 8
    ids, mask = batch["prompt_ids"].repeat_interleave(4, 0), batch["prompt_mask"].repeat_interleave(4, 0)
    s, eos = run.grpo, run.stop_ids()
    seed = int(batch["index"][0]) * 2  # _generate's seed of step 0's training batch (data seed 0)
    expected = run.model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=True,
                                  temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, seed=seed,
                                  eos_token_id=eos)[:, ids.shape[1]:].tolist()
    got = [row[:int(m.sum())] for row, m in zip(rollout.completion_ids.tolist(), rollout.completion_mask,
                                                strict=True)]
    assert got == [row[:next((i + 1 for i, t in enumerate(row) if t in eos), len(row))] for row in expected]
