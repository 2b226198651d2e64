"""The zoo lm-eval model against lm-eval's own `hf` model (transformers) on the same weights: a zoo
checkpoint and its zoo.export Hugging Face folder. Log-likelihoods within 1e-4 with the same greedy flags,
rolling log-likelihoods within 1e-4, greedy generation cut at a stop string token for token, and the local
YAML tasks (tests/fixtures/lm_eval) scored identically, in process and through `python -m zoo.lm_eval`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from lm_eval.api.instance import Instance

from .conftest import OFFLINE, ROOT, TASKS

pytestmark = pytest.mark.e2e  # lm-eval's hf model imports transformers and accelerate (~10 s)

BATCH = 3


@pytest.fixture(scope="module")
def models(pretrained):
    """(zoo from the checkpoint, zoo from the exported folder, lm-eval's hf model on that folder)."""
    from lm_eval.models.huggingface import HFLM

    from zoo.lm_eval.model import ZooLM

    hf = HFLM(pretrained=str(pretrained.hf), batch_size=BATCH, device="cpu", dtype="float32")
    return (ZooLM(ckpt=str(pretrained.ckpt), batch_size=BATCH, device="cpu"),
            ZooLM(hf=str(pretrained.hf), batch_size=BATCH, device="cpu"), hf)


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (TASKS / name).read_text().splitlines()]


def test_loglikelihoods_equal_the_hf_models(models):
    requests = [Instance("loglikelihood", {}, (f"Question: {d['question']}\nAnswer:", f" {c}"), 0)
                for d in rows("choices.jsonl") for c in d["choices"]]
    requests += [Instance("loglikelihood", {}, args, 0) for args in [
        ("", "What colour is the sky?"),  # empty context: the prefix token
        ("Question: " + "What colour is the sea? " * 8, "blue"),  # longer than the window: cut from the left
        ("the sky is ", "blue"),  # a trailing space moves to the continuation
    ]]
    *zoo_models, hf = models
    want = hf.loglikelihood(requests, disable_tqdm=True)
    assert len({greedy for _, greedy in want}) == 2  # both answers occur among the greedy flags
    for lm in zoo_models:
        got = lm.loglikelihood(requests, disable_tqdm=True)
        assert [g for g, _ in got] == pytest.approx([w for w, _ in want], abs=1e-4)
        assert [g for _, g in got] == [w for _, w in want]


def test_rolling_loglikelihoods_equal_the_hf_models(models):
    requests = [Instance("loglikelihood_rolling", {}, (d["text"],), 0) for d in rows("text.jsonl")]
    *zoo_models, hf = models
    assert max(len(hf.tok_encode(r.args[0])) for r in requests) > 2 * hf.max_length  # several windows
    want = hf.loglikelihood_rolling(requests, disable_tqdm=True)
    for lm in zoo_models:
        assert lm.loglikelihood_rolling(requests, disable_tqdm=True) == pytest.approx(want, abs=1e-4)


def test_greedy_generation_cut_at_a_stop_string_equals_the_hf_models(models):
    prompts = [d["prompt"] for d in rows("until.jsonl")]
    *zoo_models, hf = models
    free = hf.generate_until([Instance("generate_until", {}, (p, {"until": [], "max_gen_toks": 8}), 0)
                              for p in prompts], disable_tqdm=True)
    requests = [Instance("generate_until", {}, (p, {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}),
                         0) for p in prompts]
    want = hf.generate_until(requests, disable_tqdm=True)
    assert all("\n" in f and w == f.split("\n")[0] for w, f in zip(want, free, strict=True))  # each was cut
    for lm in zoo_models:
        assert lm.generate_until(requests, disable_tqdm=True) == want


TASK_NAMES = ["zoo_choice", "zoo_text", "zoo_until"]


def scores(results: dict) -> dict[str, dict[str, float]]:
    """{task: {metric: value}} without the stderr entries."""
    return {task: {k: float(v) for k, v in metrics.items() if "," in k and "stderr" not in k}
            for task, metrics in results["results"].items()}


def test_local_tasks_score_as_with_the_hf_model(pretrained, offline):
    import lm_eval
    from lm_eval.tasks import TaskManager

    import zoo.lm_eval.model  # noqa: F401  (registers --model zoo)

    tasks = TaskManager(include_path=str(TASKS), include_defaults=False)
    run = {name: scores(lm_eval.simple_evaluate(model=name, model_args=args, tasks=TASK_NAMES,
                                                batch_size=BATCH, device="cpu", task_manager=tasks))
           for name, args in [("zoo", f"ckpt={pretrained.ckpt}"),
                              ("hf", f"pretrained={pretrained.hf},dtype=float32")]}
    zoo_scores, hf_scores = run["zoo"], run["hf"]
    assert set(zoo_scores) == set(TASK_NAMES) and 0 < zoo_scores["zoo_choice"]["acc,none"] < 1
    assert zoo_scores["zoo_until"]["exact_match,none"] > 0
    for task in ("zoo_choice", "zoo_until"):  # counts of right answers: identical
        assert zoo_scores[task] == hf_scores[task]
    assert zoo_scores["zoo_text"] == pytest.approx(hf_scores["zoo_text"], rel=1e-5)


def test_command_line_runs_the_zoo_model(pretrained, tmp_path):
    """`python -m zoo.lm_eval` is lm-eval's command line with --model zoo registered."""
    env = {**os.environ, **OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    subprocess.run([sys.executable, "-m", "zoo.lm_eval", "--model", "zoo", "--model_args",
                    f"ckpt={pretrained.ckpt}", "--tasks", "zoo_choice", "--include_path", str(TASKS),
                    "--batch_size", str(BATCH), "--device", "cpu", "--output_path", str(tmp_path / "out")],
                   cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    (written,) = (tmp_path / "out").rglob("results_*.json")
    acc = json.loads(written.read_text())["results"]["zoo_choice"]["acc,none"]
    assert 0 < acc <= 1
