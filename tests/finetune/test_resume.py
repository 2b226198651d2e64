"""Resuming a fine-tuning run keeps what trains: the optimizer state in a checkpoint belongs to the parameters
that trained, so a resume that freezes other parts (even a same-sized set, where torch would load the moments
onto the wrong tensors without a word) or trains everything is refused, naming both settings."""

from __future__ import annotations

import pytest

from zoo.apps import ConfigError
from zoo.training.run import train

from .conftest import FAST

FREEZE = ["finetune=freeze", "finetune.first_layers=0"]


def run(make_run_cfg, corpus, steps: int, *extra: str, name: str):
    return train(make_run_cfg(["model=gpt_nano", "model.max_seq_len=32", "tokenizer=char", "data=text",
                               f"data.files={corpus}", *FAST, f"trainer.max_steps={steps}", "eval_every=2",
                               *extra], run=name))


@pytest.mark.e2e
def test_resume_that_changes_what_trains_is_refused(make_run_cfg, folders):
    first = run(make_run_cfg, folders["corpus"], 2, *FREEZE, "finetune.modules=[decoder_stack.layers.0]",
                name="first")
    resume = f"ckpt_path={first.last_checkpoint}"
    # a same-sized set of frozen tensors: torch's load_state_dict accepts it and moves Adam's moments of
    # layer 1 onto layer 0
    with pytest.raises(ConfigError) as err:
        run(make_run_cfg, folders["corpus"], 4, *FREEZE, "finetune.modules=[decoder_stack.layers.1]", resume,
            name="other")
    assert str(err.value) == (
        f"{resume}: the checkpoint trained with decoder_stack.layers.0 frozen, "
        "this run freezes decoder_stack.layers.1: what trains cannot change on resume (the optimizer state "
        "belongs to the parameters that trained). Resume with the checkpoint's finetune settings, or start a "
        f"new run from its weights with init_from={first.last_checkpoint}")
    with pytest.raises(ConfigError,
                       match=r"trained with decoder_stack.layers.0 frozen, this run freezes nothing: "
                             r"what trains cannot change on resume"):
        run(make_run_cfg, folders["corpus"], 4, "finetune=full", resume, name="full")
    # the same parameters frozen, however spelled, resume
    same = run(make_run_cfg, folders["corpus"], 4, "finetune=freeze", "finetune.modules=[]",
               "finetune.first_layers=1", resume, name="same")
    assert same.last_checkpoint is not None
