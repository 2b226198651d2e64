"""grpo.rollout: task=grpo's completions sampled by zoo's continuous-batching engine (`engine`) are, row for
row, `model.generate`'s for that row alone with the row's seed (the engine's guarantee), cut where the
`generate` rollouts are cut (eos, grpo.stop_strings); train.py runs with it; an unknown sampler is one error
naming the allowed ones."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import pytest
import torch

from zoo.apps import ConfigError
from zoo.tasks.grpo_batch import cut_completion
from zoo.tasks.grpo_rollouts import ROLLOUTS, Prompts, Sampling, row_seed
from zoo.training.plan import prepare

from .test_grpo import ROOT, bound, grpo_cfg, write_prompts

G, BUDGET = 4, 8


def eos_likely(model, chance: float) -> None:
    """Give eos about `chance` probability per token on random weights (the head a biased Linear sharing its
    weight), so that rows end at eos within the budget."""
    proj, vocab, eos = model.head.proj, model.config.vocab_size, model.config.eos_id
    biased = torch.nn.Linear(proj.in_features, proj.out_features, bias=True)
    with torch.no_grad():
        biased.weight = proj.weight
        biased.bias.zero_()
        biased.bias[eos] = math.log(chance * (vocab - 1) / (1 - chance))
    model.head.proj = biased


def engine_run(make_cfg, tmp_path, *extra):
    """A bound task=grpo run with engine rollouts on the same random model each time (seeded)."""
    tmp_path.mkdir(exist_ok=True)
    torch.manual_seed(0)
    run, data = bound(make_cfg, tmp_path, "tokenizer=char", "grpo.rollout=engine",
                      f"grpo.num_generations={G}", f"grpo.max_completion_length={BUDGET}", "grpo.top_k=12",
                      "grpo.top_p=0.95", *extra)
    eos_likely(run.model, 0.15)
    run.before_fit(data, resuming=False)
    return run, data


def completions(rollout) -> list[list[int]]:
    return [row[:int(m.sum())] for row, m in zip(rollout.completion_ids.tolist(), rollout.completion_mask,
                                                strict=True)]


def test_engine_rollouts_are_each_rows_generate_with_its_seed_cut_at_eos_and_stop_strings(make_cfg, tmp_path):
    """A training batch of 2 prompts x 4 completions sampled by the engine: each completion equals
    model.generate on that prompt alone with the row's seed (row_seed of the batch's seed and the row's
    index), with the same stop token and stop string, cut as the generate rollouts are cut; among them a row
    that ended at eos and a row cut by a stop string (chosen from a first run's text, so one row surely meets
    it). Before: grpo.rollout was an unknown key."""
    run, data = engine_run(make_cfg, tmp_path)
    batch = next(iter(data.train_dataloader()))
    first, _ = run._generate(batch, 0, "train")
    tokenizer, eos = data.tokenizer, run.model.config.eos_id
    row = next(r for r in completions(first) if len(r) >= 3 and eos not in r[:2])
    stop = tokenizer.decode([row[1]])
    assert stop

    run, data = engine_run(make_cfg, tmp_path / "stop", f"grpo.stop_strings=[{stop!r}]")
    rollout, logged = run._generate(batch, 0, "train")
    seed = int(batch["index"][0]) * 2  # _generate's seed of step 0's training batch (data seed 0)
    s, stops = run.grpo, run.stop_ids()
    expected = []
    for i, (ids, mask) in enumerate(zip(batch["prompt_ids"], batch["prompt_mask"], strict=True)):
        prompt = ids[mask.bool()].tolist()
        for j in range(G):
            out = run.model.generate([prompt], max_new_tokens=BUDGET, do_sample=True,
                                     temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                     seed=row_seed(seed, i * G + j), eos_token_id=stops, stop_strings=[stop],
                                     tokenizer=tokenizer)
            new = out[0, len(prompt):].tolist()
            expected.append(cut_completion(new, set(stops), [stop], tokenizer.decode))
    got = completions(rollout)
    assert got == [completion for completion, _ in expected]
    assert any(r[-1] == eos for r in got)  # a row ended at eos
    assert any(r[-1] != eos and stop in tokenizer.decode(r) for r in got)  # a row cut by the stop string
    assert float(logged["completions/clipped_ratio"]) == sum(cut for _, cut in expected) / len(expected)
    assert len({tuple(r) for r in got}) > 1  # the rows drew from different generators


def test_an_unknown_rollout_sampler_is_one_error_naming_the_allowed_ones(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match=r"grpo.rollout: Unknown GRPO rollout sampler 'vllm'\. Allowed: "
                                          r"engine, generate\."):
        prepare(grpo_cfg(make_cfg, tmp_path, "grpo.rewards=[answer_match]", "grpo.rollout=vllm"))
    assert ROLLOUTS.names() == ["engine", "generate"]


@pytest.mark.e2e  # a train.py subprocess: ~15 s
def test_train_py_grpo_with_engine_rollouts(tmp_path):
    """train.py task=grpo grpo.rollout=engine: two steps, the rollout metrics logged."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "task=grpo", "model=gpt_nano", "model.max_seq_len=32",
         "tokenizer=char", "data=prompts", f"data.path={write_prompts(tmp_path / 'prompts.jsonl')}",
         "grpo.rewards=[answer_match]", "grpo.num_generations=4", "grpo.max_completion_length=4",
         "grpo.rollout=engine", "trainer.max_steps=2", "eval_every=2", "batch_size=2", "logger=csv",
         "trainer.log_every_n_steps=1", "callbacks.samples.max_new_tokens=4", "callbacks.samples.num_shown=1",
         f"paths.output_dir={tmp_path / 'run'}", f"paths.runs_dir={tmp_path / 'runs'}",
         f"paths.cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "run" / "csv" / "metrics.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    key = "train/completions/mean_length"
    lengths = [float(r[key]) for r in rows if r.get(key)]
    assert len(lengths) == 2 and all(0 < n <= 4 for n in lengths)
    assert any(r.get("val/reward") for r in rows)


def test_generate_rollouts_of_two_kinds_in_one_batch_draw_from_different_streams():
    """A batch mixing chat and text prompts calls `generate` once per kind with the batch's seed: the kind
    holding row 0 draws with that seed (as a batch of one kind always did), the other with its first row's
    seed. Before, both drew with the batch's seed: one prompt gave the same completions in either kind."""
    from zoo.config import ModelConfig
    from zoo.presets import build

    torch.manual_seed(0)
    model = build(ModelConfig(arch="decoder", vocab_size=48, d_model=16, n_layers=1, n_heads=2,
                              max_seq_len=32))
    ids, mask = torch.randint(1, 48, (1, 5)), torch.ones(1, 5, dtype=torch.long)
    sampling, sampler = Sampling(G, BUDGET, 1.0, 1.0, 0), ROLLOUTS.get("generate")
    first, second = (sampler.sample(model, Prompts(ids, mask, [i], [0]), sampling, 7, None) for i in (0, 1))
    assert first != second
    again = model.generate(ids, attention_mask=mask, num_return_sequences=G, max_new_tokens=BUDGET,
                           do_sample=True, seed=7, eos_token_id=[0])
    assert first == again[:, 5:].tolist()
