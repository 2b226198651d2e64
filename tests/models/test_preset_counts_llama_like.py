"""The Llama-shaped presets have the parameter count of the `transformers` model with the same published
config values (both built on the meta device: no memory, no init)."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import zoo

PRESETS = {  # preset -> (transformers classes, the model's
             # config.json values), written out from the model cards
    "smollm2_135m": (LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
        max_position_embeddings=8192)),
    "qwen2_5_0_5b": (Qwen2Config, Qwen2ForCausalLM, dict(
        hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0,
        max_position_embeddings=32768)),
}
PUBLISHED = {"smollm2_135m": 134_515_008, "qwen2_5_0_5b": 494_032_768}  # "135M" / "0.49B" on the model cards


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_count_equals_transformers(name):
    config_class, model_class, values = PRESETS[name]
    with torch.device("meta"):
        hf = model_class(config_class(**values))
        ours = zoo.build(name)
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == PUBLISHED[name]


@pytest.mark.parametrize(("name", "family"), [("smollm2_135m", "llama"), ("qwen2_5_0_5b", "qwen2")])
def test_shrunk_preset_exports_as_its_family(tmp_path, name, family):
    model = zoo.build(name, vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=24).eval()
    _, model_class, _ = PRESETS[name]
    hf = model_class.from_pretrained(zoo.save_pretrained(model, tmp_path / "hf")).eval()
    assert hf.config.model_type == family
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4
