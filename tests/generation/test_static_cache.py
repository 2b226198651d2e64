"""Static (pre-allocated) KV cache and the compiled one-token step: per-step logits against a plain forward
over the whole sequence (no cache), and the same tokens as the eager dynamic cache for greedy, beam search
and seeded sampling, over every positional scheme, GQA, sliding windows and the encoder-decoder's decoder."""

from __future__ import annotations

import pytest
import torch

from tests.generation.conftest import reference_next_logits, tiny_decoder, tiny_seq2seq

IDS = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 3, 4, 11]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])  # left-padded second row


def _both(model, **kw):
    """(dynamic-cache output, static-cache output) of the same call."""
    common = dict(attention_mask=MASK, eos_token_id=[], return_dict=True) | kw
    return model.generate(IDS, **common), model.generate(IDS, cache_implementation="static", **common)


@pytest.mark.parametrize("kv_heads", [4, 1])
def test_static_step_logits_match_full_forward(positional, kv_heads):
    model = tiny_decoder(positional, n_kv_heads=kv_heads, max_seq_len=24)
    dynamic, static = _both(model, max_new_tokens=8)
    assert torch.equal(static.sequences, dynamic.sequences)
    seq = static.sequences
    mask = torch.cat([MASK, torch.ones(2, 8, dtype=MASK.dtype)], dim=1)
    for step, logits in enumerate(static.logits):
        width = IDS.shape[1] + step
        expected = reference_next_logits(model, seq[:, :width], mask[:, :width])
        torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


def test_static_sliding_window_gqa_matches_dynamic():
    model = tiny_decoder("rope", n_kv_heads=2, mixer={"sliding_window": 3}, max_seq_len=32)
    dynamic, static = _both(model, max_new_tokens=12)
    assert torch.equal(static.sequences, dynamic.sequences)
    for a, b in zip(static.logits, dynamic.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "t5_relative", "learned"])
def test_static_encoder_decoder_matches_dynamic(positional):
    model = tiny_seq2seq(positional, n_kv_heads=2)
    dynamic, static = _both(model, max_new_tokens=8)
    assert torch.equal(static.sequences, dynamic.sequences)
    for a, b in zip(static.logits, dynamic.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("build", [tiny_decoder, tiny_seq2seq])
def test_static_beam_search_matches_dynamic(build):
    model = build("rope", max_seq_len=24)
    dynamic, static = _both(model, max_new_tokens=6, num_beams=3, num_return_sequences=2)
    assert torch.equal(static.sequences, dynamic.sequences)
    torch.testing.assert_close(static.scores, dynamic.scores)


def test_static_seeded_sample_matches_dynamic():
    model = tiny_decoder("alibi", max_seq_len=24)
    dynamic, static = _both(model, max_new_tokens=8, do_sample=True, top_k=10, seed=3, num_return_sequences=2)
    assert torch.equal(static.sequences, dynamic.sequences)


@pytest.mark.e2e
def test_compiled_step_matches_eager_cache():
    """One tiny model, one compile: a left-padded prompt at batch 1 (the case where a column view of the ids
    would change strides every step), greedy and seeded sampling give the eager dynamic cache's tokens, and
    the whole run, second call included, uses one compiled graph."""
    from torch._dynamo.utils import counters

    model = tiny_decoder("rope", n_kv_heads=2, mixer={"sliding_window": 4}, max_seq_len=24)
    counters.clear()
    greedy = dict(attention_mask=MASK[1:], eos_token_id=[], max_new_tokens=8)
    assert torch.equal(model.generate(IDS[1:], compile=True, **greedy), model.generate(IDS[1:], **greedy))
    sample = dict(greedy, do_sample=True, seed=1)
    assert torch.equal(model.generate(IDS[1:], compile=True, **sample), model.generate(IDS[1:], **sample))
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.e2e  # four graphs of two models: ~30 s of compiling on 2 cores
def test_compiled_steps_keep_logits_with_several_graphs_in_the_process():
    """With two models and two batch sizes compiled in one process, torch.compile's guards pick each step's
    graph: every run's per-step logits equal a plain forward over the whole sequence, and its tokens the
    eager dynamic cache's."""
    models = [tiny_decoder("rope", n_kv_heads=2, mixer={"sliding_window": 4}, max_seq_len=24),
              tiny_decoder("learned", n_heads=2, max_seq_len=24)]
    for rows in (IDS[1:], IDS, IDS[1:]):
        mask = MASK[-rows.shape[0]:]
        for model in models:
            kw = dict(attention_mask=mask, eos_token_id=[], max_new_tokens=8, return_dict=True)
            compiled, eager = model.generate(rows, compile=True, **kw), model.generate(rows, **kw)
            assert torch.equal(compiled.sequences, eager.sequences)
            full = torch.cat([mask, torch.ones(rows.shape[0], 8, dtype=mask.dtype)], dim=1)
            for step, logits in enumerate(compiled.logits):
                width = rows.shape[1] + step
                expected = reference_next_logits(model, compiled.sequences[:, :width], full[:, :width])
                torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.e2e  # one compile of an MoE step: ~15 s on 2 cores
def test_compiled_moe_step_keeps_the_eager_logits():
    """An MoE layer's dispatch depends on the routing (tokens per expert), so its compiled step holds
    data-dependent graph pieces whose guards must run every step. Was: a compiled run that skipped the guards
    after its first step (torch's skip_guard_eval_unsafe stance) reused another routing's graph, and from
    the third token on the logits were off by up to 0.8 (tokens diverged at the sixth)."""
    import zoo

    torch.manual_seed(0)
    model = zoo.build("moe_small", n_layers=2, d_model=64, n_heads=4, vocab_size=128, max_seq_len=64).eval()
    prompt = torch.tensor([[5, 6, 7, 9, 10, 11]])
    kw = dict(max_new_tokens=24, eos_token_id=[], return_dict=True)
    compiled, eager = model.generate(prompt, compile=True, **kw), model.generate(prompt, **kw)
    assert torch.equal(compiled.sequences, eager.sequences)
    torch.testing.assert_close(torch.stack(compiled.logits), torch.stack(eager.logits), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(compile=True, use_cache=False), "use_cache=False"),
        (dict(cache_implementation="static", use_cache=False), "use_cache=False"),
        (dict(compile=True, cache_implementation="dynamic"), "cannot be compiled"),
        (dict(cache_implementation="paged"), "cache_implementation must be one of dynamic, static"),
        (dict(compile="yes"), "compile must be True or False"),
        (dict(compile=True, max_new_tokens=10),
         r"prompt \(5\) \+ max_new_tokens \(10\) = 15 positions exceed"),
    ],
)
def test_static_cache_bad_settings_raise_one_clear_error(kwargs, message):
    model = tiny_decoder("learned")  # learned positions stop at max_seq_len = 12
    with pytest.raises(ValueError, match=message):
        model.generate(IDS, attention_mask=MASK, **kwargs)


def test_compiled_step_keeps_a_graph_per_model_and_batch():
    """One compiled function serves every (model, batch, buffer size): torch's default of 8 graphs per
    function would turn the ninth shape of a long-lived process (a server, the benchmark: 3 models x 3
    batches) silently eager."""
    import torch._dynamo.config as dynamo_config

    from zoo.generation.static import GRAPHS_PER_PROCESS, compiled_step

    compiled_step()
    assert dynamo_config.recompile_limit >= GRAPHS_PER_PROCESS >= 16
