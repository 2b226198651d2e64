"""The shape trace: every shape matches the config, the traced weights are softmax(q k^T / sqrt(D) + mask)
recomputed by hand, and nothing is left installed afterwards."""

import json

import pytest
import torch

import zoo
from zoo.inspection import Tracer, trace
from zoo.modules.attention import Attention
from zoo.modules.feedforward import FeedForward

from .configs import CONFIGS, VOCAB, config

B, T, S = 2, 5, 7  # batch, (target) length, source length of the encoder-decoder


def _inputs(cfg):
    torch.manual_seed(0)
    src = torch.randint(3, VOCAB, (B, S if cfg.arch == "encoder_decoder" else T))
    if cfg.arch == "encoder_decoder":
        tgt = torch.randint(3, VOCAB, (B, T))
        return src, {"decoder_input_ids": tgt, "labels": tgt}
    return src, {"labels": src}


def _expected_shapes(cfg, stream: str) -> dict[str, tuple]:
    """Written from the config alone: what each named stage must look like."""
    H, KV, D, C, F = cfg.n_heads, cfg.kv_heads, cfg.d_model // cfg.n_heads, cfg.d_model, cfg.ffn_dim
    t = T if stream == "decoder" or cfg.arch != "encoder_decoder" else S
    if cfg.arch == "encoder":
        t = T
    out_dim = cfg.vocab_size
    shapes = {
        "input_ids": (B, t), "token_embedding": (B, t, C), "positional": (B, t, C),
        "token_type_embedding": (B, t, C),
        "embed_norm_in": (B, t, C), "embed_norm": (B, t, C), "embedding": (B, t, C), "stack_input": (B, t, C),
        "mask": (1, H if cfg.positional.name == "alibi" else 1, t, t),  # ALiBi's bias is folded into the mask
        "rotation_cos": (B, 1, t, D // 2), "rotation_sin": (B, 1, t, D // 2),
        "position_bias": (1, H, t, t), "block_input": (B, t, C),
        "q": (B, H, t, D), "k": (B, KV, t, D), "v": (B, KV, t, D), "scores": (B, H, t, t),
        "weights": (B, H, t, t),
        "heads": (B, H, t, D), "heads_concat": (B, t, H * D), "attn_output": (B, t, C),
        "cross_mask": (1, 1, t, S), "cross_q": (B, H, t, D), "cross_k": (B, KV, S, D),
        "cross_v": (B, KV, S, D),
        "cross_scores": (B, H, t, S), "cross_weights": (B, H, t, S), "cross_heads": (B, H, t, D),
        "cross_heads_concat": (B, t, H * D), "cross_output": (B, t, C),
        "ffn_hidden": (B, t, F), "ffn_output": (B, t, C), "block_output": (B, t, C),
        "stack_output": (B, t, C),
        "logits": (B, t, out_dim), "loss": (), "transform_norm_in": (B, t, C), "transform_norm": (B, t, C),
    }
    for norm in ("norm_self", "norm_cross", "norm_ffn", "final_norm"):
        shapes[norm] = shapes[f"{norm}_in"] = (B, t, C)
    if cfg.mixer.name == "mla":  # per-head q/k of N + R features (the rope part rotated), values of V
        m = cfg.mixer
        qk, v, rope = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim, m.qk_rope_head_dim
        shapes.update({"q": (B, H, t, qk), "k": (B, H, t, qk), "v": (B, H, t, v), "heads": (B, H, t, v),
                       "heads_concat": (B, t, H * v), "rotation_cos": (B, 1, t, rope // 2),
                       "rotation_sin": (B, 1, t, rope // 2)})
        for norm, width in (("q_norm", m.q_lora_rank), ("kv_norm", m.kv_lora_rank)):  # the latents' norms
            shapes[norm] = shapes[f"{norm}_in"] = (B, t, width)
    return shapes


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_traced_shape_matches_the_config(name):
    cfg = config(name)
    model = zoo.build(cfg).eval()
    ids, kwargs = _inputs(cfg)
    tr = trace(model, ids, **kwargs)
    assert tr[0].name == "input_ids" and [r.name for r in tr][-2:] == ["logits", "loss"]
    # the records are the forward's own tensors: the output is the reference
    assert torch.equal(tr[0].tensor, ids)
    assert (torch.equal(tr.get("logits").tensor, tr.output.logits)
            and torch.equal(tr[-1].tensor, tr.output.loss))
    for r in tr:
        expected = _expected_shapes(cfg, r.stream)
        assert r.name in expected, f"unexpected stage {r.name}"
        assert r.shape == expected[r.name], (r.name, r.stream, r.layer, r.shape)
        if r.tensor is not None:
            assert tuple(r.tensor.shape) == r.shape
    layers = {"encoder": cfg.n_encoder_layers if cfg.arch == "encoder_decoder" else cfg.n_layers,
              "decoder": cfg.n_decoder_layers if cfg.arch == "encoder_decoder" else cfg.n_layers}
    per_layer = ["block_input", "q", "k", "v", "scores", "weights", "heads", "heads_concat", "attn_output",
                 "block_output"] + (["ffn_hidden", "ffn_output"] if cfg.ffn.name == "mlp" else [])
    streams = ["encoder", "decoder"] if cfg.arch == "encoder_decoder" else [
        "encoder" if cfg.arch == "encoder" else "decoder"]
    for stream in streams:
        for stage in per_layer:
            assert [r.layer for r in tr.select(stage, stream=stream)] == list(range(layers[stream])), (stream,
                                                                                                       stage)
        for stage in ("input_ids", "token_embedding", "embedding"):
            assert len(tr.select(stage, stream=stream)) == 1, (stream, stage)  # shared table hooked once
    if cfg.arch == "encoder_decoder":
        assert [r.layer for r in tr.select("cross_weights")] == list(range(cfg.n_decoder_layers))
    assert tr.select("positional") or cfg.positional.name not in ("learned", "sinusoidal")
    assert bool(tr.select("rotation_cos")) == (cfg.positional.name == "rope")
    assert bool(tr.select("position_bias")) == (cfg.positional.name == "alibi")
    assert tr.records[-1].name == "loss" and torch.equal(tr.records[-1].tensor, tr.output.loss)
    json.dumps(tr.to_rows())  # plain data


def test_tracing_does_not_change_the_output():
    cfg = config("llama_gqa")
    model = zoo.build(cfg).eval()
    ids, _ = _inputs(cfg)
    with torch.no_grad():
        plain = model(ids).logits
    torch.testing.assert_close(trace(model, ids).output.logits, plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(trace(model, ids).get("logits").tensor, plain, rtol=1e-5, atol=1e-6)


def _by_hand(q, k, allowed):
    """softmax(q k^T / sqrt(D)) over allowed keys; q (B, H, T, D), k (B, KV, S, D), allowed (B|1, 1, T, S).
    A query that sees no key at all (a left pad under the causal mask) gets an all-zero row, as documented."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)


@pytest.mark.parametrize("name", ["gpt", "llama_gqa"])
def test_traced_weights_equal_weights_recomputed_from_traced_q_and_k(name):
    cfg = config(name)
    model = zoo.build(cfg).eval()
    ids, _ = _inputs(cfg)
    pad = torch.ones(B, T, dtype=torch.long)
    pad[1, :2] = 0  # second row left-padded by two
    position_ids = (pad.cumsum(-1) - 1).clamp(min=0)
    tr = trace(model, ids, attention_mask=pad, position_ids=position_ids, need_weights=True)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    allowed = causal[None, None] & pad.bool()[:, None, None, :]  # (B, 1, T, T)
    for layer in range(cfg.n_layers):
        q, k, v = (tr.get(n, layer=layer).tensor for n in ("q", "k", "v"))
        weights = tr.get("weights", layer=layer).tensor
        torch.testing.assert_close(weights, _by_hand(q, k, allowed), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(weights, tr.output.attentions[layer])  # the model's returned weights
        assert torch.all(weights.masked_select(~allowed.expand_as(weights)) == 0.0)  # exactly zero
        row_sums = weights.sum(-1)  # (B, H, T)
        torch.testing.assert_close(row_sums[0], torch.ones(cfg.n_heads, T))
        torch.testing.assert_close(row_sums[1, :, 2:], torch.ones(cfg.n_heads, T - 2))  # real queries
        assert torch.all(weights[1, :, :2] == 0.0)  # the two pad queries see no key: zero rows, not NaN
        groups = cfg.n_heads // cfg.kv_heads
        torch.testing.assert_close(tr.get("heads", layer=layer).tensor,
                                   weights @ v.repeat_interleave(groups, 1))
        concat = tr.get("heads", layer=layer).tensor.transpose(1, 2).reshape(B, T, cfg.d_model)
        torch.testing.assert_close(tr.get("heads_concat", layer=layer).tensor, concat)


def test_cross_attention_weights_recomputed_with_source_padding():
    cfg = config("transformer")
    model = zoo.build(cfg).eval()
    src, kwargs = _inputs(cfg)
    src_mask = torch.ones(B, S, dtype=torch.long)
    src_mask[0, -3:] = 0  # right-padded source
    tr = trace(model, src, attention_mask=src_mask, decoder_input_ids=kwargs["decoder_input_ids"])
    allowed = src_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    w = tr.get("cross_weights", layer=0).tensor
    torch.testing.assert_close(w,
                               _by_hand(tr.get("cross_q", layer=0).tensor, tr.get("cross_k", layer=0).tensor,
                                        allowed.expand(B, 1, T, S)), rtol=1e-5, atol=1e-6)
    assert torch.all(w[0, :, :, -3:] == 0.0)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, cfg.n_heads, T))


def _assert_clean(model):
    for path, module in model.named_modules():
        assert not module._forward_hooks and not module._forward_pre_hooks, path
        assert not module._forward_hooks_with_kwargs and not module._forward_pre_hooks_with_kwargs, path
        assert "tap" not in module.__dict__, path
    assert Attention.tap is None and FeedForward.tap is None


@pytest.mark.parametrize("name", ["transformer", "llama_gqa"])
def test_no_hooks_or_taps_remain_after_tracing_even_after_an_exception(name):
    cfg = config(name)
    model = zoo.build(cfg).eval()
    ids, kwargs = _inputs(cfg)
    trace(model, ids, **kwargs)
    _assert_clean(model)
    with pytest.raises(RuntimeError, match="boom"), Tracer(model) as tracer:
        assert tracer._handles and tracer._tapped  # installed while inside
        model(ids, **kwargs)
        raise RuntimeError("boom")
    _assert_clean(model)
    bad = torch.full_like(ids, VOCAB + 5)
    with pytest.raises(ValueError, match="vocabulary"):
        trace(model, bad, **kwargs)  # the forward itself fails
    _assert_clean(model)


def test_untraced_forward_takes_the_fast_path_again(monkeypatch):
    """Zero overhead: once the tracer exits, attention no longer runs the explicit (weights) path."""
    cfg = config("gpt")
    model = zoo.build(cfg).eval()
    ids, _ = _inputs(cfg)
    trace(model, ids)
    calls = []
    original = Attention._explicit
    monkeypatch.setattr(Attention, "_explicit", lambda self, *a: calls.append(1) or original(self, *a))
    with torch.no_grad():
        model(ids)
    assert calls == []
    with torch.no_grad(), Tracer(model):
        model(ids)
    assert len(calls) == cfg.n_layers


def test_trace_table_and_lookup_errors():
    cfg = config("gpt")
    tr = trace(zoo.build(cfg).eval(), _inputs(cfg)[0])
    from rich.console import Console

    console = Console(width=200, record=True)
    tr.print(layers=[0], console=console)
    text = console.export_text()
    assert "heads_concat" in text and f"[{B}, {cfg.n_heads}, {T}, {T}]" in text
    with pytest.raises(ValueError, match="give layer/stream"):
        tr.get("q")  # one per layer
    assert tr.get("q", layer=1).layer == 1


def test_trace_runs_in_eval_mode_and_restores_the_mode():
    model = zoo.build("gpt_nano", dropout=0.5).train()  # heavy dropout: train-mode traces would differ
    ids = torch.randint(5, 512, (1, 12))
    first, second = zoo.trace(model, ids), zoo.trace(model, ids)
    assert model.training  # restored
    assert torch.equal(first.get("logits").tensor, second.get("logits").tensor)
    model.eval()
    assert torch.allclose(first.get("logits").tensor, model(ids).logits, atol=1e-6)  # traced = explicit path
    noisy = [zoo.trace(model, ids, train_mode=True).get("logits").tensor for _ in range(2)]
    assert not model.training and not torch.equal(noisy[0], noisy[1])
