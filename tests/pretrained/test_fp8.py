"""FP8 block-quantised folders (DeepSeek-V3's layout: float8 E4M3 `weight` + float32 `weight_scale_inv`
per block, `quantization_config.quant_method: fp8`) load equal to transformers' own dequantization of the
same folder; partial blocks at a matrix's edge dequantize by the same rule; a block size zoo cannot read is
named."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV3ForCausalLM

import zoo
from tests.pretrained.decoder_checks import left_padded_logits_match, right_padded_logits_match
from tests.pretrained.helpers import saved
from tests.pretrained.test_deepseek import tiny
from zoo.pretrained.fp8 import dequantize

BLOCK = 4  # divides every tiny matrix: transformers' dequantizer needs whole blocks


def quantize(weight: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """weight (rows, cols) -> (E4M3 (rows, cols), float32 scales per block): each block's largest magnitude
    at E4M3's largest value, 448 (edge blocks may be partial)."""
    rows, cols = weight.shape
    padded = torch.nn.functional.pad(weight, (0, -cols % block[1], 0, -rows % block[0]))
    blocks = padded.unflatten(0, (-1, block[0])).unflatten(2, (-1, block[1]))  # (R, b0, C, b1)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0  # (R, C)
    q = (blocks / scale[:, None, :, None]).flatten(2).flatten(0, 1)[:rows, :cols]
    return q.to(torch.float8_e4m3fn), scale


def fp8_folder(tmp_path):
    """A tiny DeepSeek-V3 saved by transformers, every layer's projection quantized as the Hub's files are."""
    hf = tiny("v3_low_rank_q")
    path = saved(hf, tmp_path)
    weights = load_file(path / "model.safetensors")
    for name in [n for n in weights if ".layers." in n and n.endswith("_proj.weight")]:
        weights[name], weights[name.replace(".weight", ".weight_scale_inv")] = quantize(weights[name],
                                                                                       (BLOCK, BLOCK))
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [BLOCK, BLOCK]}
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_an_fp8_folder_loads_equal_to_transformers_dequantization(tmp_path):
    path = fp8_folder(tmp_path)
    theirs = DeepseekV3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()  # dequantized on CPU
    model = zoo.from_pretrained(path)
    right_padded_logits_match(theirs, model)
    left_padded_logits_match(theirs, model)
    exported = zoo.save_pretrained(model, tmp_path / "export")  # plain tensors, no quantization_config
    assert "quantization_config" not in json.loads((exported / "config.json").read_text())
    right_padded_logits_match(DeepseekV3ForCausalLM.from_pretrained(exported).eval(), model)


def test_partial_edge_blocks_dequantize_by_the_same_rule():
    """A 576 x 200 matrix in 128-blocks (DeepSeek-V3's kv_a_proj_with_mqa rows): 5 x 2 scales, the last row
    and column of blocks partial; each element is its code times its block's scale."""
    weight = torch.randn(576, 200)
    q, scale = quantize(weight, (128, 128))
    assert scale.shape == (5, 2)
    got = dequantize(q, scale, (128, 128))
    assert torch.equal(got[400:510, 150:], q[400:510, 150:].float() * scale[3, 1])
    assert torch.equal(got[520:, 130:], q[520:, 130:].float() * scale[4, 1])
    assert (got - weight).abs().max() <= weight.abs().max() * 2**-3  # E4M3: 3 mantissa bits


def test_a_block_size_zoo_cannot_read_is_named(tmp_path):
    path = fp8_folder(tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"]["weight_block_size"] = [128]
    (path / "config.json").write_text(json.dumps(config))
    message = "config.json quantization_config.weight_block_size=[128]"
    with pytest.raises(ValueError, match=re.escape(message)):
        zoo.from_pretrained(path)
