"""The zoo lm-eval model against lm-eval's own `hf` model (transformers) on the same weights: a zoo
checkpoint and its zoo.export Hugging Face folder. Log-likelihoods within 1e-4 with the same greedy flags,
rolling log-likelihoods within 1e-4, greedy generation cut at a stop string token for token, and the local
YAML tasks (tests/fixtures/lm_eval) scored identically, in process and through `python -m zoo.lm_eval`; and
the same under `--apply_chat_template` (few-shot turns as one message or several, a gen_prefix continued as
transformers' continue_final_message, a system message the template refuses dropped) with a chat template
in the export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version

import pytest
from lm_eval.api.instance import Instance
from packaging.version import Version

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


def test_rows_stopping_apart_at_several_stop_strings_equal_the_hf_models(models):
    """Each zoo row stops at its own first stop string (the hf model runs the batch until every row has
    one); after lm-eval's cut the texts are the same, and they end at different lengths."""
    prompts = [d["prompt"] for d in rows("until.jsonl")]
    *zoo_models, hf = models
    args = {"until": ["\n", "e", "Q:"], "max_gen_toks": 8, "do_sample": False}
    requests = [Instance("generate_until", {}, (p, args), 0) for p in prompts]
    want = hf.generate_until(requests, disable_tqdm=True)
    assert len({len(w) for w in want}) > 1
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


CHAT_TASKS = ["zoo_choice", "zoo_choice_prefix", "zoo_until"]


@pytest.mark.skipif(Version(version("transformers")) < Version("4.57"),
                    reason="the hf model continues a gen_prefix by transformers' rule, that of 4.57 on")
@pytest.mark.parametrize("multiturn", [True, False], ids=["multiturn", "single_turn"])
def test_chat_template_runs_score_as_with_the_hf_model(chat_pretrained, offline, multiturn):
    """--apply_chat_template with two few-shot examples: every request's context is the same text as the hf
    model's (its transformers apply_chat_template; zoo_choice_prefix's ends inside the assistant's
    "Answer:"), encoded to the same ids, scored within 1e-4 with the same greedy flags, generated alike;
    the scores are identical. The multi-turn run also has a system instruction, which the template refuses
    (raise_exception), so both render the turns again without it."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from zoo.lm_eval.model import ZooLM

    tasks = TaskManager(include_path=str(TASKS), include_defaults=False)
    zoo_lm = ZooLM(ckpt=str(chat_pretrained.ckpt), batch_size=BATCH, device="cpu")
    hf_lm = HFLM(pretrained=str(chat_pretrained.hf), batch_size=BATCH, device="cpu", dtype="float32")
    system = "Be brief." if multiturn else None
    runs = [lm_eval.simple_evaluate(model=lm, tasks=CHAT_TASKS, num_fewshot=2, apply_chat_template=True,
                                    fewshot_as_multiturn=multiturn, system_instruction=system,
                                    task_manager=tasks, log_samples=True, random_seed=0)
            for lm in (zoo_lm, hf_lm)]
    got, want = ({task: run["samples"][task] for task in CHAT_TASKS} for run in runs)
    tokens = zoo_lm.tokenizer
    for task in CHAT_TASKS:
        assert len(got[task]) == len(want[task]) > 0
        for mine, theirs in zip(got[task], want[task], strict=True):
            assert mine["arguments"] == theirs["arguments"]
            context = mine["arguments"][0][0]
            assert context.startswith("<bos>user:\n") and "Be brief" not in context  # the system turn dropped
            ids = zoo_lm.tok_encode(context)
            assert ids == hf_lm.tok_encode(context) and ids[0] == tokens.bos_id and tokens.eos_id in ids
            if task == "zoo_until":
                assert mine["resps"] == theirs["resps"]
                continue
            logprobs = [r[0][0] for r in theirs["resps"]]
            assert [r[0][0] for r in mine["resps"]] == pytest.approx(logprobs, abs=1e-4)
            assert [r[0][1] for r in mine["resps"]] == [r[0][1] for r in theirs["resps"]]
        if task == "zoo_choice_prefix":
            assert got[task][0]["arguments"][0][0].endswith("<eos>\nassistant:\nAnswer:")
    assert scores(runs[0]) == scores(runs[1])
    # zoo_until's chat prompts stop at once (an answer starting with "\n"): generation is also compared on the
    # prompts that end inside the assistant's "Answer:" (continue_final_message), which the model continues
    free = [Instance("generate_until", {}, (s["arguments"][0][0], {"until": ["\n"], "max_gen_toks": 8}), 0)
            for s in got["zoo_choice_prefix"]]
    answers = hf_lm.generate_until(free, disable_tqdm=True)
    assert zoo_lm.generate_until(free, disable_tqdm=True) == answers and any(a.strip() for a in answers)


def test_command_line_applies_the_chat_template(chat_pretrained, tmp_path):
    """`python -m zoo.lm_eval ... --apply_chat_template --fewshot_as_multiturn` runs and records it."""
    env = {**os.environ, **OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    subprocess.run([sys.executable, "-m", "zoo.lm_eval", "--model", "zoo", "--model_args",
                    f"ckpt={chat_pretrained.ckpt}", "--tasks", "zoo_choice_prefix", "--include_path",
                    str(TASKS), "--num_fewshot", "2", "--apply_chat_template", "--fewshot_as_multiturn",
                    "--batch_size", str(BATCH), "--device", "cpu", "--output_path", str(tmp_path / "out")],
                   cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    (written,) = (tmp_path / "out").rglob("results_*.json")
    results = json.loads(written.read_text())
    assert results["chat_template"].startswith("{{ bos_token }}") and results["fewshot_as_multiturn"] is True
    assert 0 <= results["results"]["zoo_choice_prefix"]["acc,none"] <= 1
