"""finetune=freeze: what a checkpoint records as frozen (hand-worked names), a freeze that leaves nothing to
train refused, a new head that trains whatever is frozen, and the resume check on LoRA and freeze records."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.checkpoint import CheckpointRecord
from zoo.finetune import apply_finetune
from zoo.finetune.freeze import frozen_names
from zoo.finetune.resume import check_resumed_training, training_record

from .conftest import FAST


def tiny():
    torch.manual_seed(0)
    return zoo.build("gpt_nano", tie_embeddings=False)


def test_frozen_parts_are_named_by_their_largest_wholly_frozen_module():
    model = tiny()
    assert frozen_names(model) == []
    model.embed.requires_grad_(False)
    model.decoder_stack.layers[1].requires_grad_(False)
    model.decoder_stack.layers[0].self_attn.qkv.weight.requires_grad_(False)  # its bias still trains
    assert frozen_names(model) == ["embed", "decoder_stack.layers.0.self_attn.qkv.weight",
                                   "decoder_stack.layers.1"]
    model.requires_grad_(False)
    assert frozen_names(model) == ["*"]


def test_freezing_every_parameter_is_refused():
    with pytest.raises(ValueError) as err:
        apply_finetune(tiny(),
                       {"name": "freeze", "modules": ["embed", "decoder_stack", "head"], "first_layers": 2})
    assert str(err.value) == (
        "finetune=freeze finetune.modules=['embed', 'decoder_stack', 'head'] finetune.first_layers=2 leaves "
        "no parameter to train (frozen: embed, decoder_stack, head, decoder_stack.layers.0, "
        "decoder_stack.layers.1); freeze less of the model (its parts: embed, decoder_stack, head)")
    # final_norm trains
    apply_finetune(tiny(), {"name": "freeze", "modules": ["embed", "head"], "first_layers": 2})


def test_a_new_head_trains_when_everything_pretrained_is_frozen(make_run_cfg, folders):
    """init_from + a classifier head: the head is new, so freezing every pretrained part (a linear probe,
    with `head` listed too) still trains it; prepare must not refuse it."""
    from zoo.training.plan import prepare

    plan = prepare(make_run_cfg([f"init_from={folders['bert']}", "task=classification", "data=classification",
                                 "data.path=x.jsonl", *FAST, "finetune=freeze",
                                 "finetune.modules=[embed,encoder_stack,head]"]))
    assert plan.init.new_head
    # the same freeze without a new head
    with pytest.raises(ValueError, match="leaves no parameter to train"):
        prepare(make_run_cfg([f"init_from={folders['bert']}", "data=text", "data.files=x.txt", *FAST,
                              "finetune=freeze", "finetune.modules=[embed,encoder_stack,head]"]))


def test_resume_check_compares_adapters_and_frozen_parts():
    saved = tiny()
    apply_finetune(saved, {"name": "freeze", "modules": ["embed"]})
    ckpt = CheckpointRecord.from_dict(training_record(saved))
    same = tiny()
    apply_finetune(same, {"name": "freeze", "modules": ["embed"]})
    check_resumed_training(same, ckpt, "last", "x.ckpt")
    lora = tiny()
    apply_finetune(lora, {"name": "lora", "rank": 2})
    with pytest.raises(ValueError,
                       match=r"^ckpt_path=last: the checkpoint's LoRA adapters None differ from this "
                             r"run's \{'rank': 2, "):
        check_resumed_training(lora, ckpt, "last", "x.ckpt")
    with pytest.raises(ValueError,
                       match=r"^ckpt_path=last: the checkpoint trained with embed frozen, this run "
                             r"freezes nothing: what trains .* init_from=x.ckpt$"):
        check_resumed_training(tiny(), ckpt, "last", "x.ckpt")
    # a checkpoint written before zoo recorded `frozen`: compared on its adapters only
    check_resumed_training(tiny(), CheckpointRecord.from_dict({}), "last", "x.ckpt")
    with pytest.raises(ValueError, match="LoRA adapters None differ"):
        check_resumed_training(lora, CheckpointRecord.from_dict({}), "last", "x.ckpt")
