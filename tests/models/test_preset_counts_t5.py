"""The t5_small preset has t5-small's shape: its parameter count equals T5ForConditionalGeneration built from
the same config values (on the meta device: no memory, no init) and the published 60,506,624."""

import torch
from transformers import T5Config, T5ForConditionalGeneration

import zoo
from zoo.presets import resolve_config


def test_t5_small_preset_matches_transformers_count():
    c = resolve_config("t5_small")
    hf_config = T5Config(vocab_size=c.vocab_size, d_model=c.d_model, d_kv=c.head_size, d_ff=c.ffn_dim,
                         num_layers=c.n_encoder_layers, num_decoder_layers=c.n_decoder_layers,
                         num_heads=c.n_heads, relative_attention_num_buckets=c.positional.buckets,
                         relative_attention_max_distance=c.positional.max_distance,
                         feed_forward_proj=c.activation)
    with torch.device("meta"):
        hf = T5ForConditionalGeneration(hf_config)
        ours = zoo.build("t5_small")
    assert ours.num_parameters() == hf.num_parameters() == 60_506_624
