"""The gemma2_2b preset has the shape of google/gemma-2-2b: its parameter count equals transformers'
Gemma2ForCausalLM built from the published config values (both on the meta device: no memory, no time)."""

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

import zoo

# google/gemma-2-2b config.json (the values that set shapes or wiring)
GEMMA2_2B = dict(vocab_size=256000, hidden_size=2304, num_hidden_layers=26, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=256, intermediate_size=9216, tie_word_embeddings=True,
                 query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0,
                 final_logit_softcapping=30.0, max_position_embeddings=8192)


def test_gemma2_2b_preset_matches_transformers_count():
    with torch.device("meta"):
        ours = zoo.build("gemma2_2b")
        theirs = Gemma2ForCausalLM(Gemma2Config(**GEMMA2_2B))
    assert ours.num_parameters() == theirs.num_parameters() == 2_614_341_888
    c = ours.config
    assert (c.d_model, c.n_layers, c.n_heads, c.kv_heads, c.head_size, c.ffn_dim, c.vocab_size) == (
        2304, 26, 8, 4, 256, 9216, 256000)
    assert (c.mixer.softcap, c.head.softcap, c.mixer.sliding_window, c.max_seq_len) == (50.0, 30.0, 4096,
                                                                                         8192)
    assert c.mixer.scale is None and c.head_size**-0.5 == GEMMA2_2B["query_pre_attn_scalar"] ** -0.5
    assert [c.layer_is_local(i) for i in range(26)] == [t == "sliding_attention"
                                                        for t in theirs.config.layer_types]
