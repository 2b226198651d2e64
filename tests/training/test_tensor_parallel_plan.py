"""trainer=fsdp_tp's plumbing without processes (zoo.training.tensor_parallel, zoo.training.strategies): which
module gets which parallel style, how trainer.* reaches lightning.Trainer, how many processes read data, the
gradient norm over two meshes, and the layout check of a resume. The numerics (2 and 4 processes against
one) are tests/training/test_tensor_parallel.py (e2e)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from zoo.modules.unfused import unfuse
from zoo.presets import build
from zoo.training.plan import prepare
from zoo.training.strategies import check_resumed_layout, data_parallel_size, trainer_arguments
from zoo.training.tensor_parallel import FSDPTPStrategy, clip_grad_norm, tensor_parallel_plan, total_grad_norm

from .conftest import TINY_LM


def _styles(plan: dict, layer: str) -> dict[str, str]:
    return {name.removeprefix(layer): type(style).__name__ for name, style in plan.items()
            if name.startswith(layer)}


def test_plan_splits_every_projection_by_heads_or_hidden_units():
    with torch.device("meta"):
        decoder = unfuse(build(dict(vocab_size=32, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=24,
                                    activation="swiglu", positional="rope")))
        seq2seq = unfuse(build("transformer_tiny", encoder_layers=1, decoder_layers=1))
    plan = tensor_parallel_plan(decoder)
    assert all(isinstance(s, (ColwiseParallel, RowwiseParallel)) for s in plan.values())
    layer = next(n for n in plan if n.endswith("self_attn.o")).removesuffix("self_attn.o")
    assert _styles(plan, layer) == {
        "self_attn.qkv.q": "ColwiseParallel", "self_attn.qkv.k": "ColwiseParallel",
        "self_attn.qkv.v": "ColwiseParallel", "self_attn.o": "RowwiseParallel",
        "ffn.up.gate": "ColwiseParallel", "ffn.up.value": "ColwiseParallel", "ffn.down": "RowwiseParallel"}
    assert len(plan) == 2 * 7  # two blocks; embeddings, norms and the head stay whole
    cross = tensor_parallel_plan(seq2seq)
    layer = next(n for n in cross if n.endswith("cross_attn.o")).removesuffix("cross_attn.o")
    styles = _styles(cross, layer)
    assert {k: v for k, v in styles.items() if k.startswith(("cross_attn", "ffn"))} == {
        "cross_attn.q": "ColwiseParallel", "cross_attn.kv.k": "ColwiseParallel",
        "cross_attn.kv.v": "ColwiseParallel", "cross_attn.o": "RowwiseParallel",
        "ffn.up": "ColwiseParallel", "ffn.down": "RowwiseParallel"}  # ungated: `up` stays one Linear


def test_fsdp_tp_plan_reaches_the_trainer(make_cfg):
    plan = prepare(make_cfg([*TINY_LM, "trainer=fsdp_tp", "trainer.accelerator=cpu", "trainer.devices=4"]))
    kwargs = trainer_arguments(plan.trainer_kwargs)
    assert "tp_size" not in kwargs and "sharded_checkpoint" not in kwargs  # zoo keys, not Trainer's
    strategy = kwargs["strategy"]
    assert isinstance(strategy, FSDPTPStrategy) and strategy._tensor_parallel_size == 2
    assert strategy._save_distributed_checkpoint
    assert data_parallel_size(plan.trainer_kwargs, 4) == 2  # two pairs read different batches
    assert data_parallel_size({"strategy": "fsdp"}, 4) == data_parallel_size({"strategy": "ddp"}, 4) == 4


def test_gradient_norm_and_clipping_match_torch_on_plain_tensors():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    for p in params:
        p.grad = torch.randn_like(p) * 3
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for c, p in zip(copies, params, strict=True):
        c.grad = p.grad.clone()
    torch.testing.assert_close(total_grad_norm([p.grad for p in params]),
                               torch.nn.utils.get_total_norm([p.grad for p in params]))
    expected = torch.nn.utils.clip_grad_norm_(copies, 1.0)
    torch.testing.assert_close(clip_grad_norm(params, 1.0), expected)
    for c, p in zip(copies, params, strict=True):
        torch.testing.assert_close(p.grad, c.grad)


@pytest.mark.parametrize(("saved", "strategy", "message"), [
    ("unfused", "fsdp", "was written by trainer.strategy=fsdp_tp (tensor parallel: q/k/v and gate/value "
                        "unfused) and this run is trainer.strategy=fsdp"),
    (None, "fsdp_tp", "was written by a strategy other than fsdp_tp (fused q/k/v) and this run is "
                      "trainer.strategy=fsdp_tp"),
])
def test_resume_needs_the_layout_of_the_checkpoint(saved, strategy, message):
    with pytest.raises(ValueError, match="resume it with the strategy that wrote it") as refused:
        check_resumed_layout(saved, {"strategy": strategy}, "last.ckpt")
    assert message in str(refused.value)
    check_resumed_layout(saved, {"strategy": "fsdp_tp" if saved else "ddp"}, "last.ckpt")  # the same: fine



def test_an_unfused_checkpoint_reads_back_in_the_fused_layout(tmp_path):
    """What a trainer=fsdp_tp run writes (unfused parts, layout 'unfused', frozen names of parts) reads back
    through read_checkpoint as the fused state dict of the same model, frozen names fused (the record keeps
    the file's layout, which a resume checks): what zoo.load, consolidate and export read."""
    from zoo.checkpoint import atomic_torch_save, read_checkpoint, zoo_section
    from zoo.tokenizers import TOKENIZERS

    tok = TOKENIZERS["char"](["the cat sat", "a dog ran"])
    model = build(dict(vocab_size=tok.vocab_size, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=24,
                       activation="swiglu", positional="rope"))
    fused = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
    state = {f"model.{k}": v for k, v in unfuse(model).state_dict().items()}
    assert any(".qkv.k." in k for k in state) and not any(k.endswith(".qkv.weight") for k in state)
    frozen = [k.removeprefix("model.") for k in state if ".qkv." in k or ".up." in k]
    section = zoo_section(model.config, "lm", tok, frozen=frozen, layout="unfused")
    atomic_torch_save({"state_dict": state, "zoo": section}, tmp_path / "tp.ckpt")
    read = read_checkpoint(tmp_path / "tp.ckpt")
    assert list(read["state_dict"]) == list(fused)  # the fused keys, in the fused order
    assert all(torch.equal(read["state_dict"][k], v) for k, v in fused.items())
    parts_of = {k.rsplit(".", 2)[0] + ".weight" if k.endswith(".weight") else k.rsplit(".", 2)[0] + ".bias"
                for k in frozen}
    assert sorted(read["zoo"]["frozen"]) == sorted(parts_of)  # x.qkv.q.weight -> x.qkv.weight, each once
    assert read["zoo"]["layout"] == "unfused"  # the file's layout stays recorded: a resume checks it
