"""MXFP4 (zoo.pretrained.mxfp4) against transformers' own dequantizer and hand-worked bytes, and a gpt-oss
folder in the Hub's MXFP4 layout (`*_blocks` / `*_scales` experts, quantization_config.quant_method=mxfp4):
zoo dequantizes it on load and its logits equal transformers' load of the same folder."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GptOssConfig, GptOssForCausalLM
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

import zoo
from tests.pretrained.decoder_checks import left_padded_logits_match, right_padded_logits_match
from tests.pretrained.helpers import perturbed, saved
from tests.pretrained.test_gpt_oss import SMALL
from zoo.pretrained.mxfp4 import pack, unpack


def test_unpack_equals_transformers_dequantizer_on_every_byte():
    """Random bytes (every code in both nibbles) and scales 2^-20 .. 2^5: zoo's (E, rows, cols) is the
    transpose of transformers' (E, cols, rows)."""
    gen = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (2, 6, 3, 16), generator=gen, dtype=torch.uint8)
    blocks[0, 0, 0] = torch.arange(16, dtype=torch.uint8) * 17  # 0x00, 0x11, ..., 0xFF
    scales = torch.randint(127 - 20, 127 + 6, (2, 6, 3), generator=gen, dtype=torch.uint8)
    theirs = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    assert torch.equal(unpack(blocks, scales).transpose(1, 2), theirs)


def test_hand_worked_block():
    """One block, scale byte 126 (x 1/2): codes 7 (6) and 9 (-0.5) in the first byte (0x97: low nibble first),
    then 1.5 (code 3) beside 0: 3, -0.25, 0.75, 0, ... zeros. pack gives those bytes back."""
    blocks = torch.zeros(1, 1, 16, dtype=torch.uint8)  # (rows, G, 16)
    blocks[0, 0, 0], blocks[0, 0, 1] = 0x97, 0x03
    values = unpack(blocks, torch.tensor([[126]], dtype=torch.uint8))  # (rows, 32)
    assert values[0, :4].tolist() == [3.0, -0.25, 0.75, 0.0] and not values[0, 4:].any()
    again, scale = pack(values)
    assert torch.equal(again, blocks) and scale.tolist() == [[126]]


def test_pack_rounds_to_the_nearest_code():
    """Scaled by 2^(floor(log2 largest) - 2), codes lie at most 2 apart (4 to 6): an element is off by at
    most one scale, or by two where the block's largest (up to 8 scales) saturates at 6; a value on the grid
    comes back exactly."""
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    back = unpack(*pack(w))
    largest = w.unflatten(-1, (-1, 32)).abs().amax(-1, keepdim=True)  # (4, 2, 1) per block
    scale = torch.exp2(torch.floor(torch.log2(largest)) - 2)
    error = (back - w).unflatten(-1, (-1, 32)).abs()
    assert bool((error <= scale).logical_or(w.unflatten(-1, (-1, 32)).abs() > 6 * scale).all())
    assert bool((error <= 2 * scale).all())
    assert torch.equal(unpack(*pack(back)), back)


def mxfp4_folder(tmp_path):
    """A tiny perturbed gpt-oss saved by transformers, its expert matrices rewritten as the Hub stores
    them."""
    hf = perturbed(GptOssForCausalLM(GptOssConfig(**{**SMALL, "intermediate_size": 32})), scale=0.05)
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.mlp.router.weight.normal_(0, 1.0)
            layer.self_attn.sinks.normal_(0, 1.0)
    path = saved(hf, tmp_path)
    tensors = load_file(path / "model.safetensors")
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        tensors[name + "_blocks"], tensors[name + "_scales"] = pack(tensors.pop(name).transpose(1, 2))
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_an_mxfp4_folder_loads_dequantized_with_transformers_logits(tmp_path):
    path = mxfp4_folder(tmp_path)
    model = zoo.from_pretrained(path)
    ref = GptOssForCausalLM.from_pretrained(path).eval()  # transformers dequantizes on a CPU
    right_padded_logits_match(ref, model)
    left_padded_logits_match(ref, model)
    assert model.decoder_stack.layers[0].ffn.experts[0].up.weight.dtype == torch.float32


def test_another_quantization_is_refused():
    hf = {"model_type": "gpt_oss", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 32, "vocab_size": 99, "quantization_config": {"quant_method": "bitsandbytes"}}
    with pytest.raises(ValueError, match=r"quantization_config.quant_method='bitsandbytes' "
                                         r"\(supported: None, mxfp4\)"):
        zoo.pretrained.FAMILIES.get("gpt_oss")().config_from_hf(hf)


@pytest.mark.parametrize("quantization", ["mxfp4", ["mxfp4"], 4])
def test_a_quantization_config_that_is_not_a_mapping_is_refused(quantization):
    """config.json's quantization_config is an object ({"quant_method": ...}); anything else is one error
    naming it, not an AttributeError from reading it."""
    hf = {"model_type": "gpt_oss", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 32, "vocab_size": 99, "quantization_config": quantization}
    with pytest.raises(ValueError, match=r"quantization_config is a mapping=False \(supported: True\)"):
        zoo.pretrained.FAMILIES.get("gpt_oss")().config_from_hf(hf)
