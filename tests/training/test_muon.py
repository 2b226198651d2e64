"""optim.name=muon: Muon (torch.optim.Muon) on the hidden matrices, AdamW on the rest, as one optimizer.
Checked against the two torch optimizers stepped by hand on a copy of the model, through the LR schedule,
across a state_dict round trip (exact resume), and in a real training run."""

from __future__ import annotations

import copy
import re

import pytest
import torch

import zoo
from zoo.training.muon import muon_parameters
from zoo.training.optim import build_optimizer, build_scheduler, param_groups
from zoo.training.run import train

from .conftest import TINY_LM, train_losses

CFG = {"name": "muon", "lr": 0.02, "weight_decay": 0.1, "momentum": 0.9, "ns_steps": 5, "betas": [0.9, 0.95]}


def _model():
    torch.manual_seed(0)
    return zoo.build("gpt_nano", vocab_size=50, max_seq_len=16)


def _loss_step(model, optimizer, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 50, (2, 12), generator=gen)
    optimizer.zero_grad()
    model(ids, labels=ids).loss.backward()
    optimizer.step()


def test_hidden_matrices_go_to_muon_the_rest_to_adamw():
    model = _model()
    names = {id(p): n for n, p in model.named_parameters()}
    hidden = {names[id(p)] for p in muon_parameters(model)}
    expected = {n for n, p in model.named_parameters() if p.dim() == 2 and ("_attn." in n or ".ffn." in n)}
    assert hidden == expected and hidden
    assert not any(n.startswith(("embed.", "head.")) for n in hidden)
    opt = build_optimizer(model, CFG)
    groups = [{names[id(p)] for p in g["params"]} for g in opt.param_groups]
    assert sum(len(g) for g in groups) == len(names) and set().union(*groups) == set(names.values())


def test_steps_equal_torch_muon_and_adamw_by_hand():
    ours, ref = _model(), _model()
    combined = build_optimizer(ours, CFG)
    hidden = muon_parameters(ref)
    rest = [p for p in ref.parameters() if all(p is not h for h in hidden)]
    by_hand = [torch.optim.Muon(hidden, lr=0.02, weight_decay=0.1, momentum=0.9, ns_steps=5,
                                adjust_lr_fn="match_rms_adamw"),
               torch.optim.AdamW(param_groups(ref, 0.1, rest), lr=0.02, betas=(0.9, 0.95), eps=1e-8)]
    schedules = [build_scheduler(o, {"name": "cosine", "warmup_steps": 2}, max_steps=6)
                 for o in [combined, *by_hand]]
    for step in range(4):
        _loss_step(ours, combined, step)
        gen = torch.Generator().manual_seed(step)
        ids = torch.randint(0, 50, (2, 12), generator=gen)
        for o in by_hand:
            o.zero_grad()
        ref(ids, labels=ids).loss.backward()
        for o in by_hand:
            o.step()
        for s in schedules:
            s.step()
    for (name, a), b in zip(ours.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    # the schedule reaches both
    assert {g["lr"] for g in combined.param_groups} == {by_hand[0].param_groups[0]["lr"]}


def test_state_dict_round_trip_resumes_exactly():
    straight, resumed = _model(), _model()
    opt = build_optimizer(straight, CFG)
    for step in range(3):
        _loss_step(straight, opt, step)
    saved_model, saved_opt = copy.deepcopy(straight.state_dict()), copy.deepcopy(opt.state_dict())
    _loss_step(straight, opt, 3)
    resumed.load_state_dict(saved_model)
    opt2 = build_optimizer(resumed, CFG)
    opt2.load_state_dict(saved_opt)
    _loss_step(resumed, opt2, 3)
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.e2e
def test_train_py_trains_with_muon(make_cfg):
    result = train(make_cfg([*TINY_LM, "optim.name=muon", "optim.lr=0.02"]))
    losses = train_losses(result.output_dir)
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())
    assert losses[max(losses)] < losses[min(losses)]


def test_a_model_without_hidden_matrices_to_train_is_one_clear_error():
    """Muon needs attention / feed-forward matrices that train; torch's own error ("optimizer got an empty
    parameter list") came after the data was built. prepare runs the same check on a meta-device model
    (tests/training/bad_inputs.py rows); the builder raises it too."""
    from zoo.training.optim import check_optimizer_model

    advice = "; use optim.name=adamw"
    for name, why in [("bigram", "this model has none (model.arch=decoder, model.n_layers=0)"),
                      ("mlp_lm", "this model has none (model.arch=mlp_lm)")]:
        model = zoo.build(name)
        for check in (build_optimizer, check_optimizer_model):
            with pytest.raises(ValueError, match=re.escape(why)) as err:
                check(model, CFG)
            assert str(err.value).endswith(advice)
    frozen = _model()
    frozen.decoder_stack.requires_grad_(False)
    with pytest.raises(ValueError, match="stacks, and finetune freezes all of them; use optim.name=adamw"):
        build_optimizer(frozen, CFG)
    check_optimizer_model(zoo.build("bigram"), {"name": "adamw"})  # adamw takes any model
