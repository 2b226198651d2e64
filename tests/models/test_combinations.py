"""Every registered positional scheme x residual wiring x architecture builds, trains a step with finite
gradients, and (decoders) decodes the same tokens with and without the KV cache. Lists come from the
registries, so a new scheme, wiring or architecture is covered without editing this file."""

import pytest
import torch

import zoo
from zoo.models import ARCHS
from zoo.modules.feedforward import ACTIVATIONS
from zoo.modules.norm import NORMS
from zoo.modules.positional import POSITIONALS
from zoo.modules.positional_settings import ROPE_SCALING
from zoo.modules.residual import WIRINGS
from zoo.modules.rope_scaling import ROPE_SCALINGS

from .tiny import tiny

V = 41
TRANSFORMER_ARCHS = [name for name in ARCHS.names() if ARCHS.get(name).transformer]  # mlp_lm: own tests


def _train_step(model) -> None:
    torch.manual_seed(0)
    ids = torch.randint(5, V, (2, 9))
    kwargs = {"decoder_input_ids": torch.randint(5, V, (2, 6))} if model.is_encoder_decoder else {}
    labels = kwargs.get("decoder_input_ids", ids)
    out = model.train()(ids, labels=labels, **kwargs)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert torch.isfinite(out.loss) and all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("arch", TRANSFORMER_ARCHS)
@pytest.mark.parametrize("wiring", WIRINGS.names())
@pytest.mark.parametrize("positional", POSITIONALS.names())
def test_knob_combination_trains_and_decodes(positional, wiring, arch):
    torch.manual_seed(0)
    model = zoo.build(dict(arch=arch, vocab_size=V, d_model=16, n_heads=2, n_layers=1, positional=positional,
                           norm_placement=wiring, max_seq_len=24, dropout=0.1))
    _train_step(model)
    if arch == "encoder":  # nothing to decode: an encoder has no KV cache
        return
    model.eval()
    prompt = torch.randint(5, V, (2, 5))
    cached, uncached = (model.generate(prompt, max_new_tokens=4, eos_token_id=[], use_cache=c)
                        for c in (True, False))
    assert torch.equal(cached, uncached)


ATTENTION_KNOBS = {  # issue 12's attention knobs, alone and together
    "head_dim": dict(head_dim=12),
    "qkv_bias": dict(mixer=dict(qkv_bias=True), bias=False),
    "qk_norm": dict(mixer=dict(qk_norm=True), norm="rmsnorm"),
    "attn_scale": dict(mixer=dict(scale=1.0)),
    "softcaps": dict(mixer=dict(softcap=2.0), head=dict(softcap=3.0)),
    "sliding_window": dict(mixer=dict(sliding_window=3), layer_pattern=["local", "global"]),
    "sinks": dict(mixer=dict(sinks=True, sliding_window=3), activation="swiglu_clamped",  # gpt-oss
                  layer_pattern=["local", "global"]),
    "all": dict(head_dim=12, mixer=dict(qkv_bias=True, qk_norm=True, scale=0.5, softcap=2.0), bias=False,
                head=dict(softcap=3.0), n_kv_heads=1),
}


@pytest.mark.parametrize("arch", TRANSFORMER_ARCHS)
@pytest.mark.parametrize("knobs", ATTENTION_KNOBS, ids=str)
def test_attention_knobs_train_and_decode(knobs, arch):
    torch.manual_seed(0)
    model = zoo.build(dict(arch=arch, vocab_size=V, d_model=16, n_heads=2, n_layers=1, positional="rope",
                           max_seq_len=24, **ATTENTION_KNOBS[knobs]))
    _train_step(model)
    if model.is_encoder_decoder or arch == "decoder":
        prompt = torch.randint(5, V, (2, 5))
        cached, uncached = (model.eval().generate(prompt, max_new_tokens=4, eos_token_id=[], use_cache=c,
                                                  num_beams=2)
                            for c in (True, False))
        assert torch.equal(cached, uncached)


SCALING_KEY_VALUES = dict(factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_len=8,
                          short_factor=[1.0, 1.5], long_factor=[2.0, 3.0])


@pytest.mark.parametrize("arch", TRANSFORMER_ARCHS)
@pytest.mark.parametrize("wiring", WIRINGS.names())
@pytest.mark.parametrize("scaling", ROPE_SCALINGS.names())
def test_partial_scaled_rope_trains_and_decodes(scaling, wiring, arch):
    """Half of each head rotates (positional.fraction 0.5) with every frequency scaling, in every wiring and
    architecture; cached decoding (positions past scaling.original_max_len: LongRoPE's factors change there)
    equals uncached."""
    keys = {k: v for k, v in SCALING_KEY_VALUES.items() if k in ROPE_SCALING.docs()[scaling]}
    torch.manual_seed(0)
    rope = dict(name="rope", fraction=0.5, scaling=dict(name=scaling, **keys))
    model = zoo.build(dict(arch=arch, vocab_size=V, d_model=16, n_heads=2, n_layers=1, positional=rope,
                           norm_placement=wiring, max_seq_len=24, dropout=0.1))
    _train_step(model)
    if arch == "encoder":
        return
    model.eval()
    prompt = torch.randint(5, V, (2, 5))
    cached, uncached = (model.generate(prompt, max_new_tokens=6, eos_token_id=[], use_cache=c)
                        for c in (True, False))
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("arch", TRANSFORMER_ARCHS)
@pytest.mark.parametrize("norm", NORMS.names())
@pytest.mark.parametrize("activation", ACTIVATIONS.names())
def test_activation_and_norm_combination_trains(activation, norm, arch):
    torch.manual_seed(0)
    _train_step(zoo.build(dict(arch=arch, vocab_size=V, d_model=16, n_heads=2, n_layers=1,
                               activation=activation, norm=norm, head=dict(transform=arch == "encoder"),
                               max_seq_len=24)))


@pytest.mark.parametrize("activation", ACTIVATIONS.names())
def test_encoder_mlm_head_takes_any_ffn_activation(activation):
    """bert_small's MLM head transform uses the ungated form of a GLU activation (was: a build error)."""
    model = tiny("bert_small", activation=activation, vocab_size=V)
    _train_step(model)
    plain = ACTIVATIONS.get(activation)
    assert model.head.activation == (ACTIVATIONS.get(plain.plain) if plain.gated else plain)


def test_head_activation_is_its_own_knob():
    model = tiny("bert_small", activation="swiglu", head=dict(activation="relu"), vocab_size=V)
    assert model.head.activation is ACTIVATIONS.get("relu")
    with pytest.raises(ValueError, match="model.head.activation='geglu' is gated"):
        tiny("bert_small", head=dict(activation="geglu"), vocab_size=V)
