"""dpo.reference=precomputed: each pair's reference log-probs computed once before the first step (the model
as it starts, LoRA adapters off), carried by the batches, kept in the checkpoint's task_state, and equal to
what the live reference (a frozen copy, or the adapters off) gives once the policy has moved; no reference
model is held. A checkpoint without them is refused for a precomputed resume."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from zoo.data.cache import RaggedIds
from zoo.data.preference_batches import PairCollator, PreferencePairs
from zoo.finetune.lora import LoRALinear, add_lora
from zoo.models import build_model
from zoo.tasks import get_task

from .test_dpo import TINY

PARTS = {"train": ([[5, 6, 7], [11, 12], [20], [30, 31, 32, 33]], [[8, 9, 1], [13, 1], [21, 22, 1], [34, 1]],
                   [[10, 1], [14, 15, 16, 1], [23, 1], [35, 36, 1]]),
         "val": ([[40, 41]], [[42, 1]], [[43, 44, 1]])}


def datamodule() -> types.SimpleNamespace:
    """What before_fit reads of a PreferenceDataModule: its splits' pairs, collate and batch size."""
    datasets = {split: PreferencePairs(tuple(RaggedIds.from_rows(rows, np.int32) for rows in parts), 64,
                                       truncate=False, origin="pairs", split=split)
                for split, parts in PARTS.items()}
    return types.SimpleNamespace(datasets=datasets, collate=PairCollator(0), batch_size=3)


def moved(model: torch.nn.Module) -> None:
    """The policy after some training: every weight (or every LoRA B) shifted."""
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))


def scored(run, model, dm, split: str):
    batch = dm.collate([dm.datasets[split][i] for i in range(len(dm.datasets[split]))])
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return batch, run.pairs(out, batch)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_precomputed_reference_equals_the_live_one(lora: bool) -> None:
    torch.manual_seed(0)
    model = build_model(TINY)
    if lora:
        add_lora(model, rank=2, alpha=4.0, dropout=0.0, targets=["self_attn.qkv", "self_attn.o"])
    model.train()
    live = get_task("dpo").for_model(model, {})
    cached = get_task("dpo").for_model(model, {"reference": "precomputed"})
    assert cached.reference is None  # no second copy in memory
    dm = datamodule()
    cached.before_fit(dm, resuming=False)
    assert model.training  # its mode is back
    moved(model)
    if lora:
        assert any(isinstance(m, LoRALinear) and m.lora_B.abs().sum() > 0 for m in model.modules())
    for split in ("train", "val"):
        batch, ours = scored(cached, model, dm, split)
        assert "ref_chosen_logps" in batch
        _, theirs = scored(live, model, dm, split)
        for name in ("ref_chosen", "ref_rejected", "chosen", "rejected"):
            assert torch.allclose(getattr(ours, name), getattr(theirs, name), atol=1e-6), (split, name)
        assert not torch.allclose(ours.chosen, ours.ref_chosen, atol=1e-4)  # the policy did move


def test_the_cache_goes_through_the_checkpoint_state() -> None:
    """run_state -> load_run_state on a resumed run (built from the trained model) gives the batches the
    values the first run computed, not the moved model's."""
    torch.manual_seed(0)
    model = build_model(TINY).train()
    first, dm = get_task("dpo").for_model(model, {"reference": "precomputed"}), datamodule()
    first.before_fit(dm, resuming=False)
    state = first.run_state()
    moved(model)
    resumed, dm2 = get_task("dpo").for_model(model, {"reference": "precomputed"}), datamodule()
    resumed.load_run_state(state)
    resumed.before_fit(dm2, resuming=True)  # takes the checkpoint's values, computes nothing
    for split in ("train", "val"):
        assert torch.equal(scored(resumed, model, dm2, split)[1].ref_chosen,
                           scored(first, model, dm, split)[1].ref_chosen)


def test_a_checkpoint_without_the_cache_is_refused_for_a_precomputed_resume() -> None:
    task = get_task("dpo")
    task.check_resumed({"zoo": {}}, {})  # live: the reference is rebuilt from init_from / the seed
    with pytest.raises(ValueError, match=r"dpo.reference=precomputed, but the checkpoint holds no "
                                         r"precomputed reference log-probs .* with dpo.reference=live"):
        task.check_resumed({"zoo": {}}, {"reference": "precomputed"})
    with pytest.raises(ValueError, match=r"dpo.reference must be one of"):
        task.settings({"reference": "cached"})


def test_a_batch_without_the_values_is_refused() -> None:
    torch.manual_seed(0)
    model = build_model(TINY)
    run, dm = get_task("dpo").for_model(model, {"reference": "precomputed"}), datamodule()
    with pytest.raises(ValueError, match="this batch carries no reference log-probs"):
        scored(run, model, dm, "train")
