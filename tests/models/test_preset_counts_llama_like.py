"""The Llama-shaped presets (SmolLM2, Qwen2.5, Llama 3.2, OLMo 2, SmolLM3, Phi-4-mini, Phi-4) have the
parameter count of the `transformers` model with the same published config values (both built on the meta
device: no memory, no init)."""

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
)

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
    "llama3_2_1b": (LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True, max_position_embeddings=131072,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=8192))),
    "olmo2_1b": (Olmo2Config, Olmo2ForCausalLM, dict(
        hidden_size=2048, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
        intermediate_size=8192, vocab_size=100352, tie_word_embeddings=False, max_position_embeddings=4096)),
    "smollm3_3b": (SmolLM3Config, SmolLM3ForCausalLM, dict(
        hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=4,
        intermediate_size=11008, vocab_size=128256, tie_word_embeddings=True, max_position_embeddings=65536)),
    "phi4_mini": (Phi3Config, Phi3ForCausalLM, dict(
        hidden_size=3072, num_hidden_layers=32, num_attention_heads=24, num_key_value_heads=8,
        intermediate_size=8192, vocab_size=200064, tie_word_embeddings=True, partial_rotary_factor=0.75,
        max_position_embeddings=4096)),
    "phi4": (Phi3Config, Phi3ForCausalLM, dict(
        hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=10,
        intermediate_size=17920, vocab_size=100352, tie_word_embeddings=False,
        max_position_embeddings=16384)),
}
# the count on each model's Hugging Face page (safetensors "Model size"; model cards round it: "135M",
# "0.49B", "1.23B", "1B", "3B", "3.8B", "14B")
PUBLISHED = {"smollm2_135m": 134_515_008, "qwen2_5_0_5b": 494_032_768, "llama3_2_1b": 1_235_814_400,
             "olmo2_1b": 1_484_916_736, "smollm3_3b": 3_075_098_624, "phi4_mini": 3_836_021_760,
             "phi4": 14_659_507_200}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_count_equals_transformers(name):
    config_class, model_class, values = PRESETS[name]
    with torch.device("meta"):
        hf = model_class(config_class(**values))
        ours = zoo.build(name)
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == PUBLISHED[name]


@pytest.mark.parametrize(("name", "family", "n_layers"), [
    ("smollm2_135m", "llama", 1), ("qwen2_5_0_5b", "qwen2", 1), ("llama3_2_1b", "llama", 1),
    ("olmo2_1b", "olmo2", 1), ("smollm3_3b", "smollm3", 4),  # smollm3: a NoPE layer
    ("phi4_mini", "phi3", 1)])
def test_shrunk_preset_exports_as_its_family(tmp_path, name, family, n_layers):
    model = zoo.build(name, vocab_size=64, d_model=32, n_layers=n_layers, n_heads=4, n_kv_heads=2,
                      d_ff=24).eval()
    _, model_class, _ = PRESETS[name]
    hf = model_class.from_pretrained(zoo.save_pretrained(model, tmp_path / "hf")).eval()
    assert hf.config.model_type == family
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4
