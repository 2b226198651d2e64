"""The LFM2 presets: lfm2_1_2b has the parameter count of transformers' Lfm2ForCausalLM built from
LiquidAI/LFM2-1.2B's config.json values (both on the meta device) and of the card (1.17B), and is key for
key what the lfm2 family reads from those values; lfm2_small, shrunk, exports as lfm2 with transformers'
logits."""

import torch
from transformers import Lfm2Config, Lfm2ForCausalLM

import zoo

# LiquidAI/LFM2-1.2B's config.json (the keys Lfm2Config reads)
LFM2_1_2B = dict(
    vocab_size=65536, hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
    block_ff_dim=12288, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0, block_multiple_of=256,
    conv_L_cache=3, conv_bias=False, full_attn_idxs=[2, 5, 8, 10, 12, 14], max_position_embeddings=128000,
    norm_eps=1e-5, rope_theta=1000000.0, pad_token_id=0, bos_token_id=1, eos_token_id=7)


def test_lfm2_1_2b_count_equals_transformers_and_the_card():
    with torch.device("meta"):
        hf = Lfm2ForCausalLM(Lfm2Config(**LFM2_1_2B))
        ours = zoo.build("lfm2_1_2b")
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == 1_170_340_608  # "1.17B"
    assert [type(layer.self_attn).__name__ for layer in ours.decoder_stack.layers].count("Attention") == 6


def test_lfm2_1_2b_is_what_the_family_reads_from_the_same_values():
    read = zoo.pretrained.FAMILIES.get("lfm2")().config_from_hf(
        {"model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"], **LFM2_1_2B})
    assert read == zoo.resolve_config("lfm2_1_2b")


def test_shrunk_lfm2_small_exports_as_lfm2(tmp_path):
    model = zoo.build("lfm2_small", vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2,
                      d_ff=24).eval()
    hf = Lfm2ForCausalLM.from_pretrained(zoo.save_pretrained(model, tmp_path / "hf")).eval()
    assert hf.config.layer_types == ["conv", "conv", "full_attention"]
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4
