"""The OLMo-hybrid preset (olmo_hybrid_7b) has the parameter count of transformers' OlmoHybridForCausalLM
built from OlmoHybridConfig's defaults (its docstring's checkpoint: allenai/Olmo-Hybrid-7B), both on the meta
device, and is the config zoo.from_pretrained reads from those values, key for key."""

import torch
from transformers import OlmoHybridConfig, OlmoHybridForCausalLM

import zoo


def test_olmo_hybrid_preset_count_equals_transformers():
    with torch.device("meta"):
        hf = OlmoHybridForCausalLM(OlmoHybridConfig())
        ours = zoo.build("olmo_hybrid_7b")
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters())


def test_olmo_hybrid_preset_is_what_the_family_reads_from_that_config():
    """Key for key (layer pattern, the linear layers' sizes, wiring, beta and norm epsilon, the attention
    layers' wiring and q/k norm) but the special token ids (the tokenizer's: a preset keeps zoo's)."""
    hf = OlmoHybridConfig().to_dict()
    read = zoo.pretrained.FAMILIES.get("olmo_hybrid")().config_from_hf(hf).to_dict()
    preset = zoo.presets.resolve_config("olmo_hybrid_7b").to_dict()
    for ids in (read, preset):
        del ids["pad_id"], ids["bos_id"], ids["eos_id"]
    assert read == preset
