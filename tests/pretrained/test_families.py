"""The family registry and the tensor-map engine: a family registers under its model_type alone, family
modules are imported on first lookup, and one map of rows reads and writes the same tensors."""

from __future__ import annotations

import torch

from zoo.config import ModelConfig
from zoo.pretrained.families import FAMILIES, MODULES
from zoo.pretrained.tensor_map import HFTensors, Op, load, save, within


def test_import_of_zoo_pretrained_imports_no_family(fresh_interpreter):
    modules = fresh_interpreter["import zoo.pretrained"].modules
    assert "zoo.pretrained" in modules
    assert sorted(m for m in MODULES.values() if f"zoo.pretrained.{m}" in modules) == []


def test_every_type_is_registered_under_its_model_type():
    assert FAMILIES.names() == sorted(MODULES)
    assert all(FAMILIES.get(name).model_type == name for name in FAMILIES.names())


def test_one_map_reads_and_writes_the_same_tensors():
    """Stacked rows split by the kv heads, a transposed Conv1D, GPT-NeoX's per-head q/k/v and `{p}` for weight
    and bias, through `load` and back through `save`."""
    cfg = ModelConfig(d_model=8, n_heads=4, n_kv_heads=2)  # q 8 rows, k and v 4 each
    rows = within("layers.{i}.", "h.{i}.", {"qkv.{p}": ("q.{p}", "k.{p}", "v.{p}"),
                                             "o.weight": Op("t", "c.weight"),
                                             "fused.weight": Op("heads", "qkv.weight")})
    zoo = {"layers.0.qkv.weight": torch.randn(16, 8), "layers.0.qkv.bias": torch.randn(16),
           "layers.0.o.weight": torch.randn(8, 6), "layers.0.fused.weight": torch.randn(24, 8)}
    hf = save(rows, zoo, cfg, prefix="model.")
    assert {k: tuple(t.shape) for k, t in hf.items()} == {
        "model.h.0.q.weight": (8, 8), "model.h.0.k.weight": (4, 8), "model.h.0.v.weight": (4, 8),
        "model.h.0.q.bias": (8,), "model.h.0.k.bias": (4,), "model.h.0.v.bias": (4,),
        "model.h.0.c.weight": (6, 8), "model.h.0.qkv.weight": (24, 8)}
    src = HFTensors(hf, "test", ["model."])
    back = load(rows, src, {k: tuple(t.shape) for k, t in zoo.items()}, cfg)
    src.finish()
    assert all(torch.equal(back[k], t) for k, t in zoo.items())
