"""The minicpm3_4b preset has the parameter count of transformers' MiniCPM3ForCausalLM built from
MiniCPM3Config's defaults (MiniCPM3-4B's shape), both on the meta device, and is key for key the config
zoo.from_pretrained reads from those config.json values."""

import torch
from transformers import MiniCPM3Config, MiniCPM3ForCausalLM

import zoo


def test_minicpm3_4b_counts_equal_transformers():
    with torch.device("meta"):
        hf = MiniCPM3ForCausalLM(MiniCPM3Config())
        ours = zoo.build("minicpm3_4b")
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == 4_073_875_968


def test_minicpm3_4b_is_what_the_family_reads_from_that_config():
    hf = MiniCPM3Config().to_dict()
    read = zoo.pretrained.FAMILIES.get("minicpm3")().config_from_hf(hf).to_dict()
    preset = zoo.presets.resolve_config("minicpm3_4b").to_dict()
    for ids in (read, preset):
        del ids["pad_id"], ids["bos_id"], ids["eos_id"]
    assert read == preset
