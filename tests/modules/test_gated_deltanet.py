"""Gated DeltaNet (zoo.modules.gated_deltanet, zoo.modules.delta_rule) against transformers' pure-PyTorch
reference: the chunked and recurrent delta rules, and the Qwen3-Next and Qwen3.5 GatedDeltaNet layers built
from a tiny config (outputs and gradients, key heads fewer than value heads); chunked equals recurrent for
several chunk sizes (one shorter than the sequence, one longer); a left-padded row equals the row alone."""

import pytest
import torch

from zoo.config import ModelConfig
from zoo.modules import delta_rule
from zoo.modules.gated_deltanet import GatedDeltaNet
from zoo.modules.mask import build_mask

transformers = pytest.importorskip("transformers")
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf35  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next as hf  # noqa: E402

D_MODEL, KEY_HEADS, VALUE_HEADS, DK, DV, KERNEL = 32, 2, 4, 8, 6, 4
MIXER = {"name": "gated_deltanet", "linear_num_key_heads": KEY_HEADS, "linear_num_value_heads": VALUE_HEADS,
         "linear_key_head_dim": DK, "linear_value_head_dim": DV, "linear_conv_kernel_dim": KERNEL}


def _cfg(chunk_size=4):
    return ModelConfig(d_model=D_MODEL, n_heads=4, vocab_size=16, norm="rmsnorm", norm_eps=1e-6, bias=False,
                       positional="none", mixer={**MIXER, "chunk_size": chunk_size})


def _hf_config(module):
    config_class = hf.Qwen3NextConfig if module is hf else hf35.Qwen3_5TextConfig
    return config_class(
        hidden_size=D_MODEL, linear_num_key_heads=KEY_HEADS, linear_num_value_heads=VALUE_HEADS,
        linear_key_head_dim=DK, linear_value_head_dim=DV, linear_conv_kernel_dim=KERNEL, rms_norm_eps=1e-6,
        num_hidden_layers=1, layer_types=["linear_attention"], vocab_size=16, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8)


def _from_qwen3_next(theirs) -> dict[str, torch.Tensor]:
    """Qwen3-Next groups its projections by key head ([q_h | k_h | v_h.. | z_h..] and [b_h.. | a_h..] per
    key head h); zoo's rows are [q | k | v], z, b, a as Qwen3.5's."""
    r = VALUE_HEADS // KEY_HEADS
    qkvz = theirs.in_proj_qkvz.weight.view(KEY_HEADS, 2 * DK + 2 * r * DV, D_MODEL)
    q, k, v, z = qkvz.split([DK, DK, r * DV, r * DV], dim=1)
    b, a = theirs.in_proj_ba.weight.view(KEY_HEADS, 2 * r, D_MODEL).split([r, r], dim=1)
    flat = lambda t: t.reshape(-1, D_MODEL)  # noqa: E731
    return {"qkv.weight": torch.cat([flat(q), flat(k), flat(v)]), "z.weight": flat(z), "b.weight": flat(b),
            "a.weight": flat(a), "conv.weight": theirs.conv1d.weight, "A_log": theirs.A_log,
            "dt_bias": theirs.dt_bias, "norm.weight": theirs.norm.weight, "o.weight": theirs.out_proj.weight}


def _from_qwen3_5(theirs) -> dict[str, torch.Tensor]:
    return {"qkv.weight": theirs.in_proj_qkv.weight, "z.weight": theirs.in_proj_z.weight,
            "b.weight": theirs.in_proj_b.weight, "a.weight": theirs.in_proj_a.weight,
            "conv.weight": theirs.conv1d.weight, "A_log": theirs.A_log, "dt_bias": theirs.dt_bias,
            "norm.weight": theirs.norm.weight, "o.weight": theirs.out_proj.weight}


def _close(got: torch.Tensor, ref: torch.Tensor) -> bool:
    """Within 1e-5. transformers runs the rule in float32 (zoo: float64 for float64 inputs), so the weights
    are drawn at a typical init scale (0.1), where float32's relative 1e-7 stays well inside it."""
    return bool((got - ref).abs().max() <= 1e-5)


LAYERS = {"qwen3_next": (hf, "Qwen3NextGatedDeltaNet", _from_qwen3_next),
          "qwen3_5": (hf35, "Qwen3_5GatedDeltaNet", _from_qwen3_5)}


def _pair(family, chunk_size=4):
    module, name, mapping = LAYERS[family]
    theirs = getattr(module, name)(_hf_config(module), layer_idx=0).double()
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.1) + (1.0 if p.dim() == 1 else 0.0))
    ours = GatedDeltaNet(_cfg(chunk_size)).double()
    ours.load_state_dict({k: v.detach().clone() for k, v in mapping(theirs).items()})
    return theirs, ours


def _grads(model, family) -> dict[str, torch.Tensor]:
    """Each parameter's gradient under zoo's names (Qwen3-Next's grouped rows regrouped like its weights)."""
    if family == "qwen3_5":
        return {k: v for k, v in _from_qwen3_5(_GradView(model)).items()}
    return _from_qwen3_next(_GradView(model))


class _GradView:
    """`module.x.weight` reads `module.x.weight.grad`: the weight mappings applied to gradients."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if isinstance(value, torch.nn.Parameter):
            return value.grad
        return _GradView(value) if isinstance(value, torch.nn.Module) else value


@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5"])
@pytest.mark.parametrize("chunk_size", [4, 64], ids=["chunks_of_4", "one_chunk_longer_than_T"])
def test_equals_transformers_layer_outputs_and_gradients(family, chunk_size):
    torch.manual_seed(0)
    theirs, ours = _pair(family, chunk_size)
    b, t = 2, 11
    x = torch.randn(b, t, D_MODEL, dtype=torch.double)
    x_theirs, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = theirs(x_theirs)
    got, weights = ours(x_ours, build_mask(None, causal=True, q_len=t, k_len=t))
    assert weights is None
    assert _close(got, expected)
    weight = torch.randn_like(got)
    (expected * weight).sum().backward()
    (got * weight).sum().backward()
    assert _close(x_ours.grad, x_theirs.grad)
    for name, grad in _grads(theirs, family).items():
        assert _close(ours.get_parameter(name).grad, grad), name


@pytest.mark.parametrize("chunk_size", [1, 3, 8, 32])
def test_chunked_equals_recurrent_and_transformers_rules(chunk_size):
    """The two forms of zoo's delta rule against each other and transformers' torch_chunk_ / torch_recurrent_
    gated_delta_rule (which take Hk heads and normalise q, k themselves), outputs, final state, gradients."""
    torch.manual_seed(1)
    b, t = 2, 13
    q, k = (torch.randn(b, t, KEY_HEADS, DK, dtype=torch.double, requires_grad=True) for _ in range(2))
    v = torch.randn(b, t, VALUE_HEADS, DV, dtype=torch.double, requires_grad=True)
    g = (-torch.rand(b, t, VALUE_HEADS, dtype=torch.double)).requires_grad_()
    beta = torch.rand(b, t, VALUE_HEADS, dtype=torch.double, requires_grad=True)
    state = torch.randn(b, VALUE_HEADS, DK, DV, dtype=torch.double)
    inputs = (q, k, v, g, beta)

    def ours(form):
        qn, kn = (hf.l2norm(x.float()).repeat_interleave(VALUE_HEADS // KEY_HEADS, 2).transpose(1, 2)
                  for x in (q, k))
        extra = {"chunk_size": chunk_size} if form is delta_rule.chunked else {}
        out, final = form(qn, kn, v.transpose(1, 2), g.transpose(1, 2), beta.transpose(1, 2), state, **extra)
        return out.transpose(1, 2), final

    results = {
        "chunked": ours(delta_rule.chunked), "recurrent": ours(delta_rule.recurrent),
        "hf_chunk": hf.torch_chunk_gated_delta_rule(*inputs, chunk_size=chunk_size, initial_state=state,
                                                    output_final_state=True, use_qk_l2norm_in_kernel=True),
        "hf_recurrent": hf.torch_recurrent_gated_delta_rule(*inputs, initial_state=state,
                                                            output_final_state=True,
                                                            use_qk_l2norm_in_kernel=True)}
    weight = torch.randn(b, t, VALUE_HEADS, DV, dtype=torch.double)
    grads = {}
    for name, (out, final) in results.items():
        grads[name] = torch.autograd.grad((out * weight).sum() + final.sum(), inputs)
    ref_out, ref_state = results["hf_recurrent"]
    for name in ("chunked", "recurrent", "hf_chunk"):
        out, final = results[name]
        assert _close(out, ref_out) and _close(final, ref_state), name
        for grad, ref in zip(grads[name], grads["hf_recurrent"], strict=True):
            assert _close(grad, ref), name


def test_layer_chunked_equals_recurrent():
    torch.manual_seed(2)
    ours = GatedDeltaNet(_cfg(chunk_size=5))
    x = torch.randn(3, 12, D_MODEL)
    mask = build_mask(None, causal=True, q_len=12, k_len=12)
    chunked, _ = ours(x, mask)
    recurrent, _ = ours(x, mask, recurrent=True)
    assert (chunked - recurrent).abs().max() < 1e-5


@pytest.mark.parametrize("recurrent", [False, True], ids=["chunked", "recurrent"])
def test_a_left_padded_row_equals_the_row_alone(recurrent):
    """The state must not absorb the pads: with a bias-free projection zeros would pass, so the pads carry
    large inputs, and the row alone is compared at every real position."""
    torch.manual_seed(3)
    ours = GatedDeltaNet(_cfg(chunk_size=4))
    t, pads = 9, 4
    alone = torch.randn(1, t - pads, D_MODEL)
    padded = torch.cat([torch.randn(1, pads, D_MODEL) * 10, alone], dim=1)
    other = torch.randn(1, t, D_MODEL)
    key_mask = torch.ones(2, t, dtype=torch.long)
    key_mask[0, :pads] = 0
    batch, _ = ours(torch.cat([padded, other]), build_mask(key_mask, causal=True, q_len=t, k_len=t),
                    recurrent=recurrent)
    expected, _ = ours(alone, build_mask(None, causal=True, q_len=t - pads, k_len=t - pads),
                       recurrent=recurrent)
    assert (batch[0, pads:] - expected[0]).abs().max() < 1e-5
    full, _ = ours(other, build_mask(None, causal=True, q_len=t, k_len=t), recurrent=recurrent)
    assert (batch[1] - full[0]).abs().max() < 1e-5


def test_equals_olmo_hybrid_layer_outputs_and_gradients():
    """OLMo-hybrid's layer (q, k, v projected apart, as zoo's qkv rows): beta times 2
    (linear_allow_neg_eigval) and the gated norm at its own epsilon 1e-5 (output_norm_eps) while the model's
    is 1e-2, so either read wrong shows; transformers' layer repeats no key head, so the counts are equal."""
    from transformers.models.olmo_hybrid import modeling_olmo_hybrid as olmo

    torch.manual_seed(0)
    config = olmo.OlmoHybridConfig(
        hidden_size=D_MODEL, linear_num_key_heads=KEY_HEADS, linear_num_value_heads=KEY_HEADS,
        linear_key_head_dim=DK, linear_value_head_dim=DV, linear_conv_kernel_dim=KERNEL, rms_norm_eps=1e-2,
        num_hidden_layers=2, num_attention_heads=4, vocab_size=16)
    theirs = olmo.OlmoHybridGatedDeltaNet(config, layer_idx=0).double()
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.1) + (1.0 if p.dim() == 1 else 0.0))
    mixer = {**MIXER, "linear_num_value_heads": KEY_HEADS, "chunk_size": 4, "linear_allow_neg_eigval": True,
             "output_norm_eps": 1e-5}
    ours = GatedDeltaNet(ModelConfig(d_model=D_MODEL, n_heads=4, vocab_size=16, norm="rmsnorm", norm_eps=1e-2,
                                     bias=False, positional="none", mixer=mixer)).double()

    def mapped(m) -> dict[str, torch.Tensor]:
        return {"qkv.weight": torch.cat([m.q_proj.weight, m.k_proj.weight, m.v_proj.weight]),
                "z.weight": m.g_proj.weight, "b.weight": m.b_proj.weight, "a.weight": m.a_proj.weight,
                "conv.weight": m.conv1d.weight, "A_log": m.A_log, "dt_bias": m.dt_bias,
                "norm.weight": m.o_norm.weight, "o.weight": m.o_proj.weight}

    ours.load_state_dict({k: v.detach().clone() for k, v in mapped(theirs).items()})
    x = torch.randn(2, 11, D_MODEL, dtype=torch.double)
    x_theirs, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = theirs(x_theirs)
    got, _ = ours(x_ours, build_mask(None, causal=True, q_len=11, k_len=11))
    assert _close(got, expected)
    weight = torch.randn_like(got)
    (expected * weight).sum().backward()
    (got * weight).sum().backward()
    assert _close(x_ours.grad, x_theirs.grad)
    for name, grad in mapped(_GradView(theirs)).items():  # up to 70 (beta up to 2): within 1e-5, or 1e-6 of
        got = ours.get_parameter(name).grad  # the largest where that is more (float32 rounding in theirs)
        assert (got - grad).abs().max() <= max(1e-5, 1e-6 * grad.abs().max()), name
