"""Parameter counts against a closed form written out here, independently of the modules."""

import pytest

import zoo
from zoo.config import ModelConfig


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _norm(c: ModelConfig) -> int:
    return {"layernorm": c.d_model * (2 if c.bias else 1), "rmsnorm": c.d_model, "none": 0}[c.norm]


def closed_form(c: ModelConfig) -> int:
    d, v, b = c.d_model, c.vocab_size, c.bias
    q, kv = d, (d // c.n_heads) * (c.n_kv_heads or c.n_heads)
    self_attn = _linear(d, q + 2 * kv, b) + _linear(q, d, b) + _norm(c)
    cross_attn = _linear(d, q, b) + _linear(d, 2 * kv, b) + _linear(q, d, b) + _norm(c)
    hidden = c.d_ff or round(c.ffn_ratio * d)
    gated = c.activation in ("swiglu", "geglu")
    ffn = 0 if c.ffn == "none" else _linear(d, hidden * (2 if gated else 1), b) + _linear(hidden, d, b) + _norm(c)
    final = _norm(c) if (c.final_norm if c.final_norm is not None else c.norm_placement == "pre") else 0

    def side() -> int:  # positions, token types and embedding norm of one input side
        pos = (c.max_seq_len + c.pos_offset) * d if c.positional == "learned" else 0
        return pos + c.type_vocab_size * d + (_norm(c) if c.embed_norm else 0)

    tokens = v * d
    head = (0 if c.tie_embeddings else v * d) + (v if c.head_bias else 0)
    if c.head_transform:
        head += _linear(d, d, b) + _norm(c)
    if c.arch == "encoder_decoder":
        enc, dec = c.encoder_layers or c.n_layers, c.decoder_layers or c.n_layers
        tokens *= 1 if c.share_embeddings else 2
        return tokens + 2 * side() + enc * (self_attn + ffn) + dec * (self_attn + cross_attn + ffn) + 2 * final + head
    if c.head == "classifier":
        head = _linear(d, d, True) + _linear(d, c.num_labels, True)
    return tokens + side() + c.n_layers * (self_attn + ffn) + final + head


@pytest.mark.parametrize("name", zoo.list_models())
def test_every_preset_matches_closed_form(name):
    model = zoo.build(name, vocab_size=1000)
    assert model.num_parameters() == closed_form(model.config)


def test_gpt2_has_the_published_124m_parameters():
    assert zoo.build("gpt2").num_parameters() == 124_439_808  # Radford et al. / HF gpt2, tied head


@pytest.mark.parametrize("name", ["gpt_small", "transformer_tiny", "bert_small"])
def test_count_does_not_change_with_head_count(name):
    counts = {zoo.build(name, vocab_size=500, n_heads=h).num_parameters() for h in (1, 2, 4, 8)}
    assert len(counts) == 1


def test_grouped_query_attention_shrinks_kv_projections():
    full = zoo.build("llama_small", n_kv_heads=8).num_parameters()
    for kv in (4, 2, 1):
        c = zoo.build("llama_small", n_kv_heads=kv).config
        saved = c.n_layers * 2 * c.d_model * (8 - kv) * c.head_size  # k and v projections, no bias
        assert zoo.build("llama_small", n_kv_heads=kv).num_parameters() == full - saved
