"""Tiny configs covering every architecture and attention layout the tracer must handle."""

from zoo.config import ModelConfig

VOCAB = 61

CONFIGS: dict[str, dict] = {
    "gpt": dict(arch="decoder", d_model=32, n_layers=2, n_heads=4, positional="learned", max_seq_len=16),
    "llama_gqa": dict(arch="decoder", d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, positional="rope",
                      activation="swiglu", norm="rmsnorm", bias=False, d_ff=40, tie_embeddings=False),
    "mqa_alibi": dict(arch="decoder", d_model=24, n_layers=1, n_heads=3, n_kv_heads=1, positional="alibi"),
    "bert": dict(arch="encoder", d_model=32, n_layers=2, n_heads=2, norm_placement="post", embed_norm=True,
                 type_vocab_size=2, head={"transform": True, "bias": True}),
    "transformer": dict(arch="encoder_decoder", d_model=32, encoder_layers=2, decoder_layers=1, n_heads=4,
                        positional="sinusoidal", norm_placement="post", embed_scale=True, d_ff=48),
    "mla": dict(arch="decoder", d_model=32, n_layers=2, n_heads=4, positional={"name": "rope", "layout":
                "interleaved"}, norm="rmsnorm", mixer={"name": "mla", "q_lora_rank": 10, "kv_lora_rank": 12,
                                                       "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                                                       "v_head_dim": 6}),
    "minimal": dict(arch="decoder", d_model=16, n_layers=1, n_heads=1, ffn="none", norm="none",
                    residual=False),
}


def config(name: str, **overrides) -> ModelConfig:
    return ModelConfig(vocab_size=VOCAB, **{**CONFIGS[name], **overrides})
