"""QLoRA against references: the layer is dequant(W) x + b + (alpha / r) B A x with W held in NF4 blocks;
adapters trained on the 4-bit base equal adapters trained (as finetune=lora) on the same base dequantised
once to fp32; merging gives a plain fp32 model with the same logits; bad input is one error naming it."""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec

import pytest
import torch
from torch import nn

import zoo
from zoo.finetune import apply_finetune, merge_lora
from zoo.modules.lora import LoRALinear
from zoo.modules.qlora import QLoRALinear

# found, not imported: collecting this file (every xdist worker does) does not pay bitsandbytes' import
NEEDS_BITSANDBYTES = pytest.mark.skipif(find_spec("bitsandbytes") is None,
                                        reason="the qlora extra (pip install 'zoo[qlora]')")

QLORA = {"name": "qlora", "rank": 4, "alpha": 8.0, "block_size": 32}
STEPS = 3
# the 16 NormalFloat levels (QLoRA paper, appendix E)
NF4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0])
TOLERANCE = 1e-5  # adapters after STEPS AdamW steps, 4-bit base vs its fp32 dequantisation (measured: 0)


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return zoo.build("gpt_nano")


@NEEDS_BITSANDBYTES
def test_layer_is_the_dequantized_base_plus_the_update():
    torch.manual_seed(0)
    base = nn.Linear(64, 48)
    layer = QLoRALinear(base, 2, 3.0, 0.0, block_size=32)
    nn.init.normal_(layer.lora_B)
    w = layer.weight  # (48, 64) fp32: what the codes stand for
    blocks = base.weight.detach().reshape(-1, 32)  # (N K / 32, 32): each block scaled by its absmax
    absmax = blocks.abs().amax(dim=1, keepdim=True)
    nearest = NF4[(blocks / absmax).unsqueeze(-1).sub(NF4).abs().argmin(dim=-1)]  # round to the nearest level
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, (nearest * absmax).reshape(48, 64), atol=1e-6, rtol=0)
    assert layer.weight_nf4.dtype == torch.uint8 and layer.weight_nf4.numel() == 48 * 64 // 2  # 2 a byte
    assert layer.weight_absmax.numel() == 48 * 64 // 32  # one absmax per block
    x = torch.randn(5, 64)
    expected = x @ w.T + base.bias + 1.5 * (x @ layer.lora_A.T @ layer.lora_B.T)
    torch.testing.assert_close(layer(x), expected)
    merged = layer.merged()
    assert type(merged) is nn.Linear and merged.weight.dtype == torch.float32
    torch.testing.assert_close(merged(x), expected)


def _train(model: nn.Module, batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for ids in batches:
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.endswith(("lora_A", "lora_B"))}


@NEEDS_BITSANDBYTES
def test_adapters_on_the_nf4_base_equal_adapters_on_its_fp32_dequantization():
    quantized = tiny()
    applied = apply_finetune(quantized, QLORA)
    # 2 layers x (qkv 96 x 32 + o 32 x 32 + up 128 x 32 + down 32 x 128) weights held in 4 bits
    assert "on 8 layers (every linear layer outside the head), their 24,576 base weights in NF4" in \
        applied.description
    layers = {n: m for n, m in quantized.named_modules() if isinstance(m, QLoRALinear)}
    assert len(layers) == 8  # every linear layer of the two blocks; the (tied) head stays float
    reference = tiny()  # the same weights, each adapted layer's base dequantised once, in fp32
    with torch.no_grad():
        for name, layer in layers.items():
            reference.get_submodule(name).weight.copy_(layer.weight)
    targets = sorted({n.split(".", 3)[-1] for n in layers})
    apply_finetune(reference, {"name": "lora", "rank": 4, "alpha": 8.0, "targets": targets})
    reference.load_state_dict({k: v for k, v in quantized.state_dict().items() if k.endswith("lora_A")},
                              strict=False)  # the same initial A (B starts at zero in both)
    assert all(type(reference.get_submodule(n)) is LoRALinear for n in layers)
    torch.manual_seed(1)
    batches = [torch.randint(0, 512, (4, 12)) for _ in range(STEPS)]
    trained, expected = _train(quantized, batches), _train(reference, batches)
    assert all(v.abs().max() > 0 for k, v in trained.items() if k.endswith("lora_B"))  # they did train
    for key, value in expected.items():
        torch.testing.assert_close(trained[key], value, atol=TOLERANCE, rtol=0)
    ids = batches[0]
    torch.testing.assert_close(quantized(ids).logits, reference(ids).logits, atol=1e-4, rtol=0)


@NEEDS_BITSANDBYTES
def test_merged_model_is_fp32_with_the_quantized_logits():
    model = tiny()
    apply_finetune(model, {**QLORA, "targets": ["qkv", "ffn.down"]})
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, QLoRALinear):
                m.lora_B.normal_()
    ids = torch.randint(0, 512, (2, 10))
    model.eval()
    unmerged = model(ids).logits
    merge_lora(model)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert {v.dtype for v in model.state_dict().values()} == {torch.float32}
    assert set(model.state_dict()) == set(zoo.build("gpt_nano").state_dict())
    torch.testing.assert_close(model(ids).logits, unmerged, atol=1e-4, rtol=0)


@NEEDS_BITSANDBYTES
def test_a_bf16_model_merges_into_bf16_layers():
    model = zoo.build("gpt_nano").to(torch.bfloat16)
    apply_finetune(model, QLORA)
    ids = torch.randint(0, 512, (2, 6))
    model.eval()
    unmerged = model(ids).logits
    merge_lora(model)
    assert {v.dtype for v in model.state_dict().values()} == {torch.bfloat16}  # no fp32 layer among bf16 ones
    torch.testing.assert_close(model(ids).logits, unmerged, atol=0.1, rtol=0.02)  # bf16 rounding of W + B A


def test_a_block_size_that_does_not_divide_is_one_error_naming_the_layer():
    model = tiny()
    with pytest.raises(ValueError) as err:
        apply_finetune(model, {**QLORA, "block_size": 64})
    assert str(err.value) == ("finetune=qlora: layer decoder_stack.layers.0.self_attn.qkv cannot be held in "
                              "NF4: finetune.block_size=64 does not divide its 32 input features (block "
                              "sizes allowed: 32)")
    assert not any(isinstance(m, LoRALinear) for m in model.modules())  # nothing replaced


def test_a_model_with_no_linear_layer_to_quantize_is_refused():
    model = nn.Sequential(nn.Embedding(10, 32), nn.LayerNorm(32))
    with pytest.raises(ValueError) as err:
        apply_finetune(model, QLORA)
    assert str(err.value) == ("finetune=qlora: Sequential has no nn.Linear layer outside its output head to "
                              "hold in 4 bits (its linear layers: none)")


def test_missing_bitsandbytes_is_one_error_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # import bitsandbytes -> ImportError
    model = tiny()
    with pytest.raises(ValueError) as err:
        apply_finetune(model, QLORA)
    message = str(err.value)
    assert message.startswith("finetune=qlora quantises the base with bitsandbytes, which cannot be imported")
    assert message.endswith("pip install 'zoo[qlora]' (bitsandbytes)")
    assert not any(isinstance(m, LoRALinear) for m in model.modules())


def test_bitsandbytes_imports_with_the_hub_offline_and_the_setting_is_restored(monkeypatch):
    """bitsandbytes' CPU backend asks the Hub for a kernel when imported; without network that waited 10
    minutes on this machine. zoo imports it with the Hub offline and puts the user's setting back."""
    import importlib

    import huggingface_hub.constants as constants

    from zoo.modules import qlora

    seen = {}

    def fake_import(name):
        seen[name] = (os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE)
        return sys.modules[__name__]

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(importlib, "import_module", fake_import)
    qlora.bitsandbytes()
    assert seen == {"bitsandbytes": ("1", True)}
    assert "HF_HUB_OFFLINE" not in os.environ and constants.HF_HUB_OFFLINE is False
