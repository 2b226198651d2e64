"""The gpt-oss presets have the parameter count of transformers' GptOssForCausalLM with the published config
values (both built on the meta device), and the totals and active counts of OpenAI's model card: 20.91B /
3.61B (gpt-oss-20b) and 116.83B / 5.13B (gpt-oss-120b), where the card's active count leaves out the token
embedding table (a lookup; the unembedding is counted)."""

import pytest
import torch
from transformers import GptOssConfig, GptOssForCausalLM

import zoo
from zoo.inspection import parameter_counts

PRESETS = {  # preset -> (layers, experts, the card's total and active billions to two decimals)
    "gpt_oss_20b": (24, 32, "20.91", "3.61"),
    "gpt_oss_120b": (36, 128, "116.83", "5.13"),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.e2e) if n == "gpt_oss_120b" else n
                                  for n in sorted(PRESETS)])
def test_gpt_oss_preset_counts_equal_transformers_and_the_model_card(name):
    layers, experts, total, active = PRESETS[name]
    with torch.device("meta"):  # GptOssConfig's defaults are gpt-oss-120b's but for these two
        hf = GptOssForCausalLM(GptOssConfig(num_hidden_layers=layers, num_local_experts=experts))
        ours = zoo.build(name)
    counts = parameter_counts(ours)
    assert counts["total"] == ours.num_parameters() == sum(p.numel() for p in hf.parameters())
    embedding = ours.embed.tokens.weight.numel()
    assert (f"{counts['total'] / 1e9:.2f}", f"{(counts['active'] - embedding) / 1e9:.2f}") == (total, active)
