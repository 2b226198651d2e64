"""Parameter counts against a closed form written out here, independently of the modules."""

import dataclasses

import pytest
import torch

import zoo
from zoo.config import ModelConfig


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _norm(c: ModelConfig, dim: int | None = None) -> int:
    dim = dim or c.d_model
    return {"layernorm": dim * (2 if c.bias else 1), "rmsnorm": dim, "rmsnorm_1p": dim, "none": 0}[c.norm]


GATED = ("swiglu", "geglu", "geglu_tanh", "swiglu_clamped")  # up projection holds [gate | value]


def _task_head(c: ModelConfig) -> int:
    """A head other than lm, as transformers builds it: a pooler dense (BERT's, on an encoder's classifier by
    default; on head=none only when asked), ModernBERT's dense + norm when model.head.dense, then a projection
    to num_labels (2 for qa), with a bias except on a decoder's classifier (`score`)."""
    h, decoder = c.head, c.arch != "encoder"
    default_pooler = "tanh" if h.name == "classifier" and not decoder else "none"
    pooler = getattr(h, "pooler", None) or default_pooler  # qa and token_classifier have none
    pool = _linear(c.d_model, c.d_model, True) if pooler != "none" else 0
    if h.name == "none":
        return pool
    dense = _linear(c.d_model, c.d_model, c.bias) + _norm(c) if h.dense else 0
    bias = h.proj_bias if h.proj_bias is not None else not (decoder and h.name == "classifier")
    return pool + dense + _linear(c.d_model, 2 if h.name == "qa" else h.num_labels, bias)


def _layer_tags(c: ModelConfig, index: int) -> list[str]:
    """Layer `index`'s tags in model.layer_pattern: the prefix, then the cycle tiled (read here by hand)."""
    prefix, cycle = c.layer_pattern.prefix, c.layer_pattern.cycle
    if index < len(prefix):
        return prefix[index].split("+")
    return cycle[(index - len(prefix)) % len(cycle)].split("+") if cycle else []


def _latent_attention(c: ModelConfig, m) -> int:
    """mixer=mla: the query (full rank, or down, norm, up), kv_a to latent + rope key, its norm, kv_b to each
    head's no-rope key and value, o; biases (model.mixer.bias, else model.bias) on the down projections
    and o."""
    d, bias = c.d_model, c.bias if m.bias is None else m.bias
    q_out = c.n_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
    low = m.q_lora_rank
    query = _linear(d, q_out, False) if low is None else (
        _linear(d, low, bias) + _norm(c, low) + _linear(low, q_out, False))
    return (query + _linear(d, m.kv_lora_rank + m.qk_rope_head_dim, bias) + _norm(c, m.kv_lora_rank)
            + _linear(m.kv_lora_rank, c.n_heads * (m.qk_nope_head_dim + m.v_head_dim), False)
            + _linear(c.n_heads * m.v_head_dim, d, bias))


def _short_conv(c: ModelConfig, m) -> int:
    """linear_mixer=short_conv: in_proj to [b | c | h], a depthwise conv of conv_L_cache taps, out_proj; a
    bias on each when conv_bias."""
    d, bias = c.d_model, m.conv_bias
    return _linear(d, 3 * d, bias) + d * m.conv_L_cache + (d if bias else 0) + _linear(d, d, bias)


def _gated_deltanet(c: ModelConfig, m) -> int:
    """linear_mixer=gated_deltanet: qkv to [q | k | v] (no bias), its depthwise conv, z, b and a, A_log and
    dt_bias per value head, the gated norm over Dv, o."""
    d, hv, dv = c.d_model, m.linear_num_value_heads, m.linear_value_head_dim
    width = 2 * m.linear_num_key_heads * m.linear_key_head_dim + hv * dv
    return (d * width + width * m.linear_conv_kernel_dim + d * hv * dv + 2 * d * hv + 2 * hv + dv
            + hv * dv * d)


# model.linear_mixer's name -> its count (the layers tagged linear)
LINEAR_MIXERS = {"short_conv": _short_conv, "gated_deltanet": _gated_deltanet}


def closed_form(c: ModelConfig) -> int:
    d, v, b = c.d_model, c.vocab_size, c.bias
    head = c.head_dim or d // c.n_heads
    q, kv = c.n_heads * head, (c.n_kv_heads or c.n_heads) * head
    wrap = _norm(c) * (2 if c.norm_placement == "sandwich" else 1)  # the norms around one sub-layer
    shared = c.norm_placement == "parallel_shared"  # one norm per block, counted with self-attention
    latent = c.mixer if c.mixer.name == "mla" else None
    if latent is not None:  # cross-attention is attention with its defaults
        c = dataclasses.replace(c, mixer="attention")
    per_head = c.mixer.qk_norm_scope == "head"  # one norm per head's features, or over the whole q / k
    qk = (2 * _norm(c, head) if per_head else _norm(c, q) + _norm(c, kv)) if c.mixer.qk_norm else 0
    # Qwen2: q/k/v bias only
    sinks = c.n_heads if c.mixer.sinks else 0  # one learned logit per head (gpt-oss), self-attention only
    gate = _linear(d, q, c.use_qkv_bias) if getattr(c.mixer, "output_gate", False) else 0  # Qwen3-Next
    self_attn = _linear(d, q + 2 * kv, c.use_qkv_bias) + _linear(q, d, b) + qk + sinks + gate + wrap
    if latent is not None:
        self_attn = _latent_attention(c, latent) + wrap
    linear = c.linear_mixer  # a hybrid: the layers tagged linear run it instead of model.mixer
    n_linear = sum(1 for i in range(c.n_layers) if linear is not None and "linear" in _layer_tags(c, i))
    linear_attn = LINEAR_MIXERS[linear.name](c, linear) + wrap if n_linear else 0
    wrap = 0 if shared else wrap
    cross_attn = (_linear(d, q, c.use_qkv_bias) + _linear(d, 2 * kv, c.use_qkv_bias) + _linear(q, d, b) + qk
                  + wrap)
    hidden = c.d_ff or round(c.ffn_ratio * d)
    gated = c.activation in GATED

    def mlp(width: int) -> int:
        return _linear(d, width * (2 if gated else 1), b) + _linear(width, d, b)

    def ffn_of(layers: int) -> int:  # a stack's FFNs: MoE layers (ffn=moe, by its pattern) or dense ones
        if c.ffn.name == "none":
            return 0
        moe = c.ffn.to_data()
        n_moe = sum(1 for i in range(layers) if c.ffn.name == "moe" and "dense" not in _layer_tags(c, i))
        width, shared = moe.get("expert_d_ff") or hidden, moe.get("n_shared_experts", 0)
        experts = moe.get("n_experts", 8)
        router = _linear(d, experts, moe.get("router_bias", False))
        one_moe = (router + experts * mlp(width) + (mlp(shared * width) if shared else 0)
                   + (d if shared and moe.get("shared_gate") else 0))  # router, experts, shared (+ gate)
        return n_moe * one_moe + (layers - n_moe) * mlp(hidden) + layers * wrap
    final = _norm(c) if (c.final_norm if c.final_norm is not None else c.norm_placement != "post") else 0

    def side() -> int:  # positions, token types and embedding norm of one input side
        p = c.positional
        pos = (c.max_seq_len + p.offset) * d if p.name == "learned" else 0
        pos += p.buckets * c.n_heads if p.name == "t5_relative" else 0  # one bias table per stack
        return pos + c.type_vocab_size * d + (_norm(c) if c.embed_norm else 0)

    tokens = v * d
    # first_attn_norm=false: one norm fewer per stack, layer 0's before its self-attention (ModernBERT)
    self_attn_0 = self_attn - (0 if c.first_attn_norm else _norm(c))
    lm_head = c.head if c.head.name == "lm" else None  # its keys: transform, bias (tied or not)
    out = (0 if c.tie_embeddings else v * d) + (v if lm_head and lm_head.bias else 0)
    if c.arch == "mlp_lm":  # Bengio et al.: window of context_size embeddings -> hidden -> back to d_model
        hidden = c.d_ff or round(c.ffn_ratio * d)
        return tokens + _linear(c.context_size * d, hidden, b) + _linear(hidden, d, b) + out
    if lm_head and lm_head.transform:
        out += _linear(d, d, b) + _norm(c)
    if lm_head is None:
        out = _task_head(c)
    if c.arch == "encoder_decoder":
        enc, dec = c.encoder_layers or c.n_layers, c.decoder_layers or c.n_layers
        tokens *= 1 if c.share_embeddings else 2
        return (tokens + 2 * side() + enc * self_attn + ffn_of(enc) + dec * (self_attn + cross_attn)
                + ffn_of(dec) + 2 * final + out - 2 * (self_attn - self_attn_0))
    return (tokens + side() + c.n_layers * self_attn + ffn_of(c.n_layers) + final + out
            - (self_attn - self_attn_0) - n_linear * (self_attn - linear_attn))


# 6,144 / 4,608 / 14,848 / 24,576 expert modules: ~9 / ~8 / ~3-10 / ~14 s to build even on the meta device
SLOW_TO_BUILD = {"qwen3_30b_a3b", "gpt_oss_120b", "deepseek_v3_671b", "qwen3_next_80b_a3b"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.e2e) if n in SLOW_TO_BUILD else n
                                  for n in zoo.list_models()])
def test_every_preset_matches_closed_form(name):
    with torch.device("meta"):  # shapes only: a 2B preset costs nothing
        model = zoo.build(name, vocab_size=1000)
    assert model.num_parameters() == closed_form(model.config)


@pytest.mark.parametrize("knobs",
                         [dict(head_dim=12, mixer=dict(qk_norm=True), norm="rmsnorm"),
                          dict(norm_placement="sandwich"),
                          dict(activation="geglu_tanh", norm="rmsnorm_1p"), dict(mixer=dict(qkv_bias=True),
                                                                                  bias=False),
                          dict(norm_placement="parallel", final_norm=False),
                          dict(norm_placement="parallel_shared"),
                          dict(norm_placement="post_sublayer", mixer=dict(qk_norm=True, qk_norm_scope="all"),
                               n_kv_heads=1),
                          dict(first_attn_norm=False),
                          dict(norm_placement="sandwich", first_attn_norm=False),
                          dict(activation="swiglu", layer_pattern=["dense", "moe"],
                               ffn=dict(name="moe", n_experts=3, expert_d_ff=16, n_shared_experts=2,
                                        shared_gate=True)),
                          dict(norm_placement="sandwich", ffn=dict(name="moe", n_experts=2, top_k=1),
                               layer_pattern={"prefix": ["dense"], "cycle": ["moe"]})])
@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_new_knobs_match_closed_form(arch, knobs):
    model = zoo.build(dict(arch=arch, d_model=32, n_heads=4, n_layers=2, vocab_size=50, **knobs))
    assert model.num_parameters() == closed_form(model.config)


@pytest.mark.parametrize("knobs", [dict(head="none"), dict(head=dict(name="none", pooler="tanh")),
                                   dict(head=dict(name="classifier", num_labels=3)),
                                   dict(head=dict(name="classifier", num_labels=3, pooler="relu",
                                                  proj_bias=False)),
                                   dict(head=dict(name="classifier", num_labels=3, pooler="none",
                                                  dense=True, pool="mean")),
                                   dict(head=dict(name="token_classifier", num_labels=5, dense=True)),
                                   dict(head="qa"), dict(head=dict(name="qa", proj_bias=False))])
@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_heads_match_closed_form(arch, knobs):
    model = zoo.build(dict(arch=arch, d_model=32, n_heads=4, n_layers=2, vocab_size=50, **knobs))
    assert model.num_parameters() == closed_form(model.config)


def test_bare_encoder_decoder_matches_closed_form():
    model = zoo.build(dict(arch="encoder_decoder", d_model=32, n_heads=4, n_layers=2, vocab_size=50,
                           head="none"))
    assert model.num_parameters() == closed_form(model.config)


def test_gpt2_has_the_published_124m_parameters():
    with torch.device("meta"):  # shapes only
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
