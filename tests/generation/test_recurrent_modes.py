"""Speculative decoding and the static cache on models whose layers hold a recurrent state (Gated DeltaNet)
or a convolution window (short_conv), alone or beside attention layers: speculative greedy output is the
target's plain greedy output token for token (hybrid target and draft, a plain-attention draft, a
left-padded prompt, drafts rejected mid-block, so the states are rolled back); the static cache, eager and
compiled, gives the dynamic cache's tokens and logits on a left-padded batch, beam search included."""

from __future__ import annotations

import copy

import pytest
import torch

import zoo
from zoo.generation import speculative

VOCAB = 48
GDN = {"name": "gated_deltanet", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
       "linear_key_head_dim": 8, "linear_value_head_dim": 6, "chunk_size": 4}
CONV = {"name": "short_conv", "conv_bias": True}
BASE = dict(arch="decoder", vocab_size=VOCAB, d_model=32, n_heads=4, d_ff=48, max_seq_len=64, norm="rmsnorm",
            activation="swiglu", init_std=0.2, tie_embeddings=False)
MODELS = {  # the layer kinds: a recurrent state beside K/V, a window beside K/V, recurrent layers only
    "gdn_hybrid": dict(n_layers=3, positional="rope", linear_mixer=GDN,
                       layer_pattern=["linear", "linear", "full"]),
    "conv_hybrid": dict(n_layers=3, positional="rope", linear_mixer=CONV,
                        layer_pattern=["linear", "full", "linear"]),
    "gdn_only": dict(n_layers=2, positional="none", mixer=GDN),
}
IDS = torch.tensor([[5, 6, 7, 8, 9, 10], [0, 0, 0, 3, 4, 11]])
MASK = (IDS != 0).long()  # the second row left-padded


def build(name: str, seed: int = 0, **keys) -> torch.nn.Module:
    """Weights drawn wide and the head untied, so that greedy tokens depend on the whole history."""
    torch.manual_seed(seed)
    return zoo.build({**BASE, **MODELS[name], **keys}).eval()


def near_copy(model: torch.nn.Module, noise: float) -> torch.nn.Module:
    """The model with every weight moved a little: a draft that agrees with it on most tokens, not all."""
    draft = copy.deepcopy(model)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn_like(p))
    return draft


@pytest.fixture
def rounds(monkeypatch) -> list[tuple[int, int]]:
    """(draft tokens kept, draft tokens proposed) of every speculative round."""
    seen: list[tuple[int, int]] = []
    verify = speculative._verify

    def spy(logits, drafted, qs, choice):
        n, own = verify(logits, drafted, qs, choice)
        seen.append((n, drafted.shape[1]))
        return n, own

    monkeypatch.setattr(speculative, "_verify", spy)
    return seen


@pytest.mark.parametrize("name", list(MODELS))
def test_speculative_greedy_with_a_draft_rejected_mid_block_equals_plain_greedy(name, rounds):
    """A near copy of the target drafts: some rounds keep part of a block, so each recurrent layer of both
    models goes back to its state after the last kept token."""
    target = build(name)
    draft = near_copy(target, 0.08)
    prompt = IDS[:1]
    plain = target.generate(prompt, max_new_tokens=20, eos_token_id=[], use_cache=False, return_dict=True)
    spec = target.generate(prompt, max_new_tokens=20, eos_token_id=[], assistant_model=draft,
                           num_assistant_tokens=4, return_dict=True)
    assert spec.sequences.tolist() == plain.sequences.tolist()
    assert any(0 < n < k for n, k in rounds), rounds  # a block cut in its middle
    for a, b in zip(spec.logits, plain.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("target_name, draft_kind", [
    ("gdn_hybrid", "conv_hybrid"),  # both hybrid, of different mixers
    ("conv_hybrid", "attention"),  # a plain-attention draft
    ("gdn_hybrid", "attention"),
])
def test_speculative_greedy_with_another_draft_equals_plain_greedy(target_name, draft_kind):
    target = build(target_name)
    if draft_kind == "attention":
        torch.manual_seed(2)
        draft = zoo.build({**BASE, "n_layers": 1, "positional": "rope"}).eval()
    else:
        draft = build(draft_kind, seed=2, n_layers=2, layer_pattern=["linear", "full"])
    for prompt in ([5, 6, 7, 8, 9, 10], [33]):
        plain = target.generate([prompt], max_new_tokens=12, eos_token_id=[], use_cache=False)
        for k in (1, 3):
            spec = target.generate([prompt], max_new_tokens=12, eos_token_id=[], assistant_model=draft,
                                   num_assistant_tokens=k)
            assert spec.tolist() == plain.tolist()


@pytest.mark.parametrize("name", ["gdn_hybrid", "conv_hybrid"])
def test_speculative_left_padded_prompt_equals_plain_greedy(name):
    target = build(name)
    draft = near_copy(target, 0.08)
    kw = dict(attention_mask=MASK[1:], max_new_tokens=10, eos_token_id=[])
    plain = target.generate(IDS[1:], **kw)
    assert torch.equal(target.generate(IDS[1:], assistant_model=draft, num_assistant_tokens=3, **kw), plain)


def test_rolled_back_cache_continues_as_a_cache_that_never_saw_the_rejected_tokens():
    """crop after a multi-token forward lands on the state after the kept tokens (each layer: K/V, window,
    recurrent state), so the next logits equal those of a cache fed only the kept tokens."""
    model = build("gdn_hybrid")
    seq = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13]])
    rolled, clean = model.new_cache(), model.new_cache()
    rolled.keep_states(4)
    with torch.no_grad():
        model(seq, cache=rolled)
        rolled.crop(7)
        model(seq[:, :7], cache=clean)
        a = model(seq[:, 7:8], cache=rolled).logits
        b = model(seq[:, 7:8], cache=clean).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_a_crop_past_what_was_kept_is_one_error():
    model = build("gdn_hybrid")
    cache = model.new_cache()
    cache.keep_states(2)
    with torch.no_grad():
        model(IDS[:1], cache=cache)
    with pytest.raises(ValueError, match="keeps its states after the last 2 tokens of each forward"):
        cache.crop(3)


def _static_and_dynamic(model, **kw):
    common = dict(attention_mask=MASK, eos_token_id=[], return_dict=True) | kw
    return model.generate(IDS, cache_implementation="static", **common), model.generate(IDS, **common)


@pytest.mark.parametrize("name", list(MODELS))
def test_static_cache_equals_the_dynamic_cache(name):
    """Greedy on a left-padded batch (a step's token is real, whatever slot the buffer is at), beam
    search (the states follow the beams) and seeded sampling."""
    model = build(name)
    static, dynamic = _static_and_dynamic(model, max_new_tokens=10)
    assert torch.equal(static.sequences, dynamic.sequences)
    for a, b in zip(static.logits, dynamic.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    static, dynamic = _static_and_dynamic(model, max_new_tokens=6, num_beams=3, num_return_sequences=2)
    assert torch.equal(static.sequences, dynamic.sequences)
    static, dynamic = _static_and_dynamic(model, max_new_tokens=6, do_sample=True, top_k=10, seed=3)
    assert torch.equal(static.sequences, dynamic.sequences)


def test_the_static_cache_updates_its_state_buffers_in_place():
    model = build("gdn_hybrid")
    from zoo.generation.static import StaticStepper
    from zoo.generation.stepper import DecoderStepper

    stepper = StaticStepper(DecoderStepper(model, IDS, MASK, use_cache=True), 64, compile=False)
    with torch.inference_mode():
        stepper.append(stepper.next_tokens(greedy=True)[1])
        layer = stepper.cache.layers[0]
        buffers = {name: value.data_ptr() for name, value in layer.state.items()}
        for _ in range(3):
            stepper.append(stepper.next_tokens(greedy=True)[1])
    assert {name: value.data_ptr() for name, value in layer.state.items()} == buffers
    assert layer.state["recurrent"].shape == (2, 4, 8, 6)


@pytest.mark.e2e  # one compile of a hybrid step: ~60 s on 2 shared cores
def test_compiled_hybrid_step_equals_the_dynamic_cache():
    """One graph for the whole run: the state buffers are read and written in place, the position moves
    as a tensor."""
    from torch._dynamo.utils import counters

    model = build("gdn_hybrid")
    kw = dict(attention_mask=MASK, eos_token_id=[], max_new_tokens=8, return_dict=True)
    counters.clear()
    compiled, dynamic = model.generate(IDS, compile=True, **kw), model.generate(IDS, **kw)
    assert counters["stats"]["unique_graphs"] == 1
    assert torch.equal(compiled.sequences, dynamic.sequences)
    torch.testing.assert_close(torch.stack(compiled.logits), torch.stack(dynamic.logits), atol=1e-4,
                               rtol=1e-4)
