"""compile.*: compiled training gives eager training's losses, the training forward traces as one graph (no
graph breaks) across the architectures, positional schemes and attention knobs, and compile.enabled=auto
compiles on CUDA only."""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torch._dynamo

import zoo
from zoo.training.compiling import wants_compile
from zoo.training.module import ZooLightningModule

VOCAB, T = 50, 8
TINY = {"vocab_size": VOCAB, "d_model": 16, "n_heads": 2, "max_seq_len": 16, "dropout": 0.0}


class _Losses(L.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def _train_losses(compile_cfg: dict, steps: int = 3) -> list[float]:
    torch.manual_seed(0)
    model = zoo.build({"arch": "decoder", "n_layers": 1, **TINY})
    module = ZooLightningModule(model, task="lm", tokenizer=None, optim={"lr": 1e-2},
                                scheduler={"name": "constant", "warmup_steps": 0}, compile_cfg=compile_cfg)
    gen = torch.Generator().manual_seed(0)
    ids = [torch.randint(3, VOCAB, (2, T + 1), generator=gen) for _ in range(steps)]
    batches = [{"input_ids": i[:, :-1], "targets": i[:, 1:]} for i in ids]
    losses = _Losses()
    trainer = L.Trainer(max_steps=steps, logger=False, callbacks=[losses], accelerator="cpu",
                        gradient_clip_val=1.0, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    assert (module._forward is not model) == wants_compile(compile_cfg, "cpu")
    return losses.losses


def test_compiled_training_losses_equal_eager():
    """Inductor (the default backend) on one tiny model: 3 optimizer steps, the same losses within 1e-5
    (inductor reorders floating-point sums; the steps after the first also check the compiled backward)."""
    eager = _train_losses({"enabled": False})
    compiled = _train_losses({"enabled": True, "backend": "inductor"})
    assert len(eager) == len(compiled) == 3
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=1e-5, atol=1e-5)
    assert eager[0] != eager[-1]  # the weights moved: the later losses compare trained steps


KNOBS = {  # representative configs: the three architectures, every positional scheme, the attention knobs
    "decoder learned parallel": dict(arch="decoder", n_layers=1, positional="learned",
                                     norm_placement="parallel"),
    "decoder rope gqa qk_norm swiglu rmsnorm": dict(arch="decoder", n_layers=1, n_kv_heads=1,
                                                    positional=dict(name="rope", scaling=dict(
                                                        name="yarn", factor=2.0, original_max_len=8)),
                                                    mixer=dict(qk_norm=True), activation="swiglu",
                                                    norm="rmsnorm"),
    "decoder alibi sliding window": dict(arch="decoder", n_layers=2, positional="alibi",
                                         mixer=dict(sliding_window=4), layer_pattern=["local", "global"]),
    "decoder sinusoidal softcaps sandwich": dict(arch="decoder", n_layers=1, positional="sinusoidal",
                                                 mixer=dict(softcap=50.0), head=dict(softcap=30.0),
                                                 norm_placement="sandwich"),
    "encoder none": dict(arch="encoder", n_layers=1, positional="none"),
    "encoder classifier": dict(arch="encoder", n_layers=1, head=dict(name="classifier", num_labels=3)),
    "encoder_decoder t5_relative": dict(arch="encoder_decoder", n_layers=1, positional="t5_relative",
                                        head_dim=8),
}


@pytest.mark.parametrize("knobs", KNOBS.values(), ids=KNOBS.keys())
def test_training_forward_is_one_graph(knobs):
    """dynamo.explain traces without a backend compile (cheap). Inputs are value-checked on the host during
    fit (inputs_checked_on_host), so the forward, labels and document ids included, has no host sync."""
    model = zoo.build({**TINY, **knobs}).train()
    model.inputs_checked_on_host = True
    ids = torch.randint(3, VOCAB, (2, T), generator=torch.Generator().manual_seed(0))
    classifier = model.config.head.name == "classifier"
    inputs = {"input_ids": ids, "labels": torch.tensor([0, 2]) if classifier else ids}
    if knobs["arch"] != "decoder":  # padded tasks (mlm, seq2seq, classification) pass a padding mask
        inputs["attention_mask"] = torch.tensor([[1] * T, [1] * (T - 3) + [0] * 3])
    if knobs["arch"] == "encoder_decoder":
        inputs["decoder_input_ids"] = ids.flip(1)
    else:
        inputs["document_ids"] = torch.tensor([[0] * 5 + [1] * (T - 5), [0] * T])
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda **kw: model(**kw).loss)(**inputs)
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
    assert explained.graph_count == 1


def test_auto_compiles_on_cuda_only():
    assert wants_compile({"enabled": "auto"}, "cuda:0") and not wants_compile({"enabled": "auto"}, "cpu")
    assert wants_compile({"enabled": True}, "cpu") and not wants_compile({"enabled": False}, "cuda")
    assert not wants_compile(None, "cuda")
    assert len(_train_losses({"enabled": "auto"}, steps=1)) == 1  # fit on CPU: setup leaves the model eager


@pytest.mark.parametrize("enabled", [False, True])
def test_checkpoint_holds_each_weight_once(enabled):
    """The forward alias (eager model or its compiled wrapper) is not a submodule: the module's state_dict,
    and so every checkpoint, holds exactly the model's own keys under `model.` (it once held a `_forward.`
    copy)."""
    model = zoo.build({"arch": "decoder", "n_layers": 1, **TINY})
    module = ZooLightningModule(model, task="lm", tokenizer=None, optim={"lr": 1e-2},
                                scheduler={"name": "constant", "warmup_steps": 0},
                                compile_cfg={"enabled": enabled, "backend": "eager"})
    assert sorted(module.state_dict()) == sorted(f"model.{k}" for k in model.state_dict())
