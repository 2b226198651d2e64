"""Sizes that cannot fit in memory are refused from the config alone, before any weight is allocated
(zoo.models.size); the lower bound is checked against real parameter counts, and the meta device builds
anything."""

import time

import pytest
import torch

import zoo
from zoo.models.base import build_model
from zoo.models.size import physical_memory
from zoo.models.vocabulary import ARCHS
from zoo.presets import resolve_config

TINY = dict(vocab_size=64, d_model=16, n_heads=2, n_layers=2, max_seq_len=16)


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder", "mlp_lm"])
def test_least_parameters_is_a_lower_bound_of_the_built_model(arch):
    extra = dict(positional="none", context_size=3) if arch == "mlp_lm" else {}
    cfg = resolve_config(dict(arch=arch, **TINY, **extra))
    assert 0 < ARCHS.get(arch).least_parameters(cfg) <= build_model(cfg).num_parameters()


@pytest.mark.parametrize("overrides, keys", [
    (dict(n_layers=4096, d_model=2**16), "model.n_layers=4096, model.d_model=65536"),  # 4096: the most layers
    (dict(arch="encoder_decoder", decoder_layers=4096, d_model=2**16),
     "model.n_layers=2, model.decoder_layers=4096"),
    (dict(vocab_size=2**31 - 1, d_model=2**16), "model.d_model=65536, model.n_heads=2 (head size 32768), "
                                                "model.vocab_size=2147483647"),  # 2**31 - 1: the largest size
])
def test_a_model_larger_than_memory_is_refused_by_its_sizes_before_allocation(overrides, keys, monkeypatch):
    """Before the guard, n_layers=10**10 was built layer by layer until memory ran out."""
    monkeypatch.setattr(torch.nn.Linear, "__init__", lambda *a, **k: pytest.fail("a layer was built"))
    start = time.process_time()
    with pytest.raises(ValueError, match="more than this machine's") as err:
        zoo.build({**TINY, **overrides})
    assert time.process_time() - start < 1.0
    assert keys in str(err.value) and "torch.device('meta')" in str(err.value)


def test_the_meta_device_builds_what_memory_could_not_hold():
    assert physical_memory() is not None
    with torch.device("meta"):
        model = zoo.build({**TINY, "vocab_size": physical_memory() // 16 + 1})  # fp32 table > RAM
    assert model.embed.tokens.weight.is_meta
