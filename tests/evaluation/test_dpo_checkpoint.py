"""evaluate.py on a task=dpo checkpoint (issue 38): scored on a held-out preference file against
reference=<the model the run started from>, with the run's dpo.* settings kept in the checkpoint, it gives
the loss and trl's six reward metrics that training's validation logged on the same pairs; without a
reference, with one that does not fit, or reference= on another task's checkpoint: one ConfigError each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import zoo
from tests.tasks.test_dpo import TINY
from tests.tokenizers import test_chat
from tests.tokenizers.chat_templates import FAMILIES
from tests.tokenizers.test_chat import write_folder
from zoo.apps import ConfigError
from zoo.evaluation.run import evaluate
from zoo.models import build_model
from zoo.tasks import get_task
from zoo.tokenizers import load_hf_tokenizer

from .conftest import CONF, write_checkpoint

NAMES = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
         "logps/rejected")


def write_pairs(path: Path) -> Path:
    """40 conversational pairs (trl's messages format)."""
    rows = [{"prompt": [{"role": "user", "content": f"Where is {who}? {i}"}],
             "chosen": [{"role": "assistant", "content": f"{who} is in {place}."}],
             "rejected": [{"role": "assistant", "content": f"{who} is in {other}."}]}
            for i in range(10) for who, place, other in (("Ann", "Oslo", "Rome"), ("Bo", "Lima", "Oslo"),
                                                         ("Cy", "Rome", "Lima"), ("Di", "Oslo", "Lima"))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def hf_start(tmp_path) -> Path:
    """A tiny Llama with Qwen2.5's tokenizer and chat template, saved as a Hugging Face folder."""
    qwen = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok = load_hf_tokenizer(write_folder(test_chat.base_tokenizer.__wrapped__(), qwen, tmp_path / "tok"))
    zoo.save_pretrained(build_model(get_task("dpo").model_config(TINY, tok)), tmp_path / "hf",
                        model_type="llama")
    tok.save_hf(tmp_path / "hf")
    return tmp_path / "hf"


@pytest.mark.e2e  # a 4-step DPO run
def test_evaluate_scores_a_dpo_checkpoint_as_its_validation(tmp_path, make_eval_cfg, hf_start):
    from zoo.training.run import train

    pairs = write_pairs(tmp_path / "pairs.jsonl")
    data = ["data=preference", f"data.path={pairs}"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[
            "task=dpo", f"init_from={hf_start}", *data, "dpo.beta=0.2", "batch_size=4", "logger=csv",
            "trainer.accelerator=cpu", "trainer.max_steps=4", "eval_every=4",
            "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false", "callbacks.samples=null",
            "optim.lr=1e-2",
            f"paths.output_dir={tmp_path / 'run'}", f"paths.runs_dir={tmp_path}",
            f"paths.cache_dir={tmp_path / 'c'}"])
    result = train(cfg)
    assert result.metrics["val/rewards/margins"] != pytest.approx(0.0, abs=1e-4)  # the policy moved
    ckpt = [f"ckpt={result.last_checkpoint}", *data, "output=null", "batch_size=3"]
    with pytest.raises(ConfigError, match=r"give reference=<the model the DPO run started from"):
        evaluate(make_eval_cfg([*ckpt, "split=val"]))
    report = evaluate(make_eval_cfg([*ckpt, "split=val", f"reference={hf_start}"]))
    assert report.task == "dpo" and report.metrics["pairs"] == 4  # 10% of 40 held out, as in training
    for name in ("loss", *NAMES):
        assert report.metrics[name] == pytest.approx(result.metrics[f"val/{name}"], abs=1e-5), name
    itself = evaluate(make_eval_cfg([*ckpt, "split=all", f"reference={result.last_checkpoint}"]))
    assert itself.metrics["pairs"] == 40 and itself.metrics["rewards/margins"] == pytest.approx(0, abs=1e-6)


def test_a_reference_for_another_task_or_that_does_not_fit_is_one_error(tmp_path, make_eval_cfg, hf_start):
    tok = load_hf_tokenizer(hf_start)
    lm_model = build_model(get_task("lm").model_config(TINY, tok))
    lm = write_checkpoint(tmp_path / "lm.ckpt", lm_model, "lm", tok)
    pairs = ["data=preference", f"data.path={write_pairs(tmp_path / 'pairs.jsonl')}", "output=null"]
    with pytest.raises(ConfigError, match=r"reference= applies to task=dpo checkpoints .* task=lm"):
        evaluate(make_eval_cfg([f"ckpt={lm}", "data=stdlib_text", "output=null", f"reference={hf_start}"]))
    model = build_model(get_task("dpo").model_config(TINY, tok))
    state = {"task_state": get_task("dpo").for_model(model, {}).run_state()}
    dpo = write_checkpoint(tmp_path / "dpo.ckpt", model, "dpo", tok, **state)
    with pytest.raises(ConfigError, match=rf"^reference={tmp_path / 'none'}: .*no such file or folder"):
        evaluate(make_eval_cfg([f"ckpt={dpo}", *pairs, f"reference={tmp_path / 'none'}"]))
    wider = zoo.build("llama_small", vocab_size=tok.vocab_size, d_model=48, n_layers=1, n_heads=2,
                      n_kv_heads=2, d_ff=64, max_seq_len=64)
    zoo.save_pretrained(wider, tmp_path / "wider", model_type="llama")
    with pytest.raises(ConfigError, match=rf"^reference={tmp_path / 'wider'}: .*do not fit"):
        evaluate(make_eval_cfg([f"ckpt={dpo}", *pairs, f"reference={tmp_path / 'wider'}"]))
    bare = write_checkpoint(tmp_path / "bare.ckpt", model, "dpo", tok)  # saved before zoo kept dpo.*
    with pytest.raises(ConfigError, match=r"does not record its dpo.\* settings"):
        evaluate(make_eval_cfg([f"ckpt={bare}", *pairs, f"reference={hf_start}"]))
