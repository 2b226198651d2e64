"""The unfused layout (zoo.modules.unfused) that tensor parallelism splits: the fused layout's function.

- A part holds exactly the fused weight's rows (q, k, v; gate, value), checked against slices by hand.
- Unfused attention (MHA, GQA, cross) and FFN (gated, ungated) give the fused outputs and input / weight
  gradients (1e-6); a whole decoder and encoder-decoder the same logits.
- fuse_state_dict turns an unfused model's state dict back into the fused one, key for key."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

import zoo
from zoo.config import ModelConfig
from zoo.modules.attention import Attention
from zoo.modules.feedforward import FeedForward
from zoo.modules.mask import build_mask
from zoo.modules.unfused import FusedColumns, fuse_state_dict, is_unfused_key, unfuse

ATTENTION = {
    "mha": (dict(d_model=16, n_heads=4), False),
    "gqa": (dict(d_model=16, n_heads=4, n_kv_heads=2, mixer={"qkv_bias": True}), False),
    "cross": (dict(d_model=16, n_heads=4, n_kv_heads=2, mixer={"qkv_bias": True}), True),
}


@pytest.fixture(autouse=True)
def _float64():
    """Fused and split matmuls round differently in float32 (about 1e-5 on some CPUs: AMD EPYC's kernels
    block a fused GEMM otherwise than three small ones); in float64 the layouts agree far inside 1e-6."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _pair(module: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    return module, unfuse(copy.deepcopy(module))


def _grads(module: torch.nn.Module, fused: bool) -> dict[str, torch.Tensor]:
    """Parameter gradients under fused names (an unfused module's parts concatenated back)."""
    grads = {name: p.grad for name, p in module.named_parameters(remove_duplicate=False)
             if p.grad is not None}  # a shared A under each part's name; frozen weights have none
    return grads if fused else fuse_state_dict(grads)


def _same_function(fused: torch.nn.Module, unfused: torch.nn.Module, x: torch.Tensor,
                   forward: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
                   loss: Callable[[torch.Tensor], torch.Tensor], grad_tol: float = 1e-6) -> torch.Tensor:
    """`forward(module, x)` through both layouts, then `loss` backward: outputs and input gradients within
    1e-6, the same parameters get gradients, equal within `grad_tol`. Returns the unfused output."""
    results = []
    for module, is_fused in ((fused, True), (unfused, False)):
        x.grad = None
        out = forward(module, x)
        loss(out).backward()
        results.append((out.detach(), x.grad.clone(), _grads(module, is_fused)))
    (out_f, dx_f, g_f), (out_u, dx_u, g_u) = results
    torch.testing.assert_close(out_u, out_f, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(dx_u, dx_f, atol=1e-6, rtol=1e-6)
    assert sorted(g_u) == sorted(g_f)
    for key, grad in g_f.items():
        torch.testing.assert_close(g_u[key], grad, atol=grad_tol, rtol=grad_tol, msg=key)
    return out_u


@pytest.mark.parametrize("case", list(ATTENTION))
def test_unfused_attention_equals_fused(case):
    overrides, cross = ATTENTION[case]
    torch.manual_seed(0)
    fused, unfused = _pair(Attention(ModelConfig(vocab_size=8, **overrides), cross=cross))
    name = "kv" if cross else "qkv"
    assert isinstance(getattr(unfused, name), FusedColumns)
    parts = dict(getattr(unfused, name).named_children())
    kv = 4 * fused.n_kv_heads
    rows = {"k": kv, "v": kv} if cross else {"q": 16, "k": kv, "v": kv}
    start = 0
    for part, size in rows.items():  # the fused weight's rows, in order
        torch.testing.assert_close(parts[part].weight, getattr(fused, name).weight[start:start + size],
                                   atol=0, rtol=0)
        start += size
    x, memory = torch.randn(2, 5, 16, requires_grad=True), torch.randn(2, 7, 16)
    mask = build_mask(None, causal=not cross, q_len=5, k_len=7 if cross else 5)
    _same_function(fused, unfused, x, lambda m, x: m(x, mask, memory=memory if cross else None)[0],
                   lambda out: (out * torch.arange(16.0)).sum())


@pytest.mark.parametrize("activation", ["swiglu", "gelu"])
def test_unfused_feedforward_equals_fused(activation):
    torch.manual_seed(0)
    fused, unfused = _pair(FeedForward(ModelConfig(vocab_size=8, d_model=8, d_ff=12, activation=activation)))
    assert isinstance(unfused.up, FusedColumns) == (activation == "swiglu")  # ungated FFNs keep `up`
    x = torch.randn(3, 4, 8, requires_grad=True)
    out_u = _same_function(fused, unfused, x, lambda m, x: m(x), lambda out: out.pow(2).sum())
    if activation == "swiglu":  # gate = rows [0, 12), value = rows [12, 24): act(gate) * value by hand
        h = torch.nn.functional.silu(x @ fused.up.weight[:12].T + fused.up.bias[:12]) * (
            x @ fused.up.weight[12:].T + fused.up.bias[12:])
        torch.testing.assert_close(out_u, fused.down(h), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("spec", [
    dict(arch="decoder", activation="swiglu", n_kv_heads=2, positional="rope"),
    dict(arch="encoder_decoder", activation="geglu", n_kv_heads=1, positional="sinusoidal"),
])
def test_unfused_model_logits_and_state_dict(spec):
    torch.manual_seed(0)
    model = zoo.build(dict(vocab_size=32, d_model=16, n_heads=4, n_layers=2, d_ff=24, max_seq_len=16,
                           **spec)).eval()
    unfused = unfuse(copy.deepcopy(model))
    ids = torch.randint(0, 32, (2, 9))
    inputs = dict(input_ids=ids) if spec["arch"] == "decoder" else dict(input_ids=ids, decoder_input_ids=ids)
    with torch.no_grad():
        torch.testing.assert_close(unfused(**inputs).logits, model(**inputs).logits, atol=1e-6, rtol=1e-6)
    state = unfused.state_dict()
    assert any(is_unfused_key(k) for k in state) and not any(is_unfused_key(k) for k in model.state_dict())
    fused = fuse_state_dict(state)
    assert list(fused) == list(model.state_dict())  # the fused keys, in the model's order
    for key, tensor in model.state_dict().items():
        assert torch.equal(fused[key], tensor), key


def test_fuse_state_dict_names_a_missing_part():
    with pytest.raises(ValueError, match=r"blocks.0.self_attn.qkv.weight: unfused part\(s\) \['v'\] missing"):
        fuse_state_dict({"blocks.0.self_attn.qkv.q.weight": torch.zeros(2, 2),
                         "blocks.0.self_attn.qkv.k.weight": torch.zeros(2, 2)})


def test_unfused_lora_adapter_shares_its_a_and_equals_the_fused_adapter():
    """A LoRA adapter on a fused qkv (zoo.finetune.lora) splits into q/k/v adapters holding B's rows and one
    shared A: the same output, the same gradients (A's summed over the parts), fused back key for key."""
    from zoo.finetune.lora import add_lora

    torch.manual_seed(0)
    fused = Attention(ModelConfig(vocab_size=8, d_model=16, n_heads=4, n_kv_heads=2))
    add_lora(fused, rank=4, alpha=8.0, dropout=0.0, targets=["qkv"])
    with torch.no_grad():
        fused.qkv.lora_B.normal_()  # zero at init: give B values so that A's gradient is not zero
    for name, param in fused.named_parameters():
        param.requires_grad_("lora_" in name)  # what finetune=lora trains
    unfused = unfuse(copy.deepcopy(fused))
    parts = dict(unfused.qkv.named_children())
    assert parts["q"].lora_A is parts["k"].lora_A is parts["v"].lora_A  # one parameter
    assert not parts["q"].weight.requires_grad  # LoRA's frozen base stays frozen
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = build_mask(None, causal=True, q_len=5, k_len=5)
    _same_function(fused, unfused, x, lambda m, x: m(x, mask)[0], lambda out: out.pow(2).sum(), grad_tol=1e-5)
    state = fuse_state_dict(unfused.state_dict())
    assert list(state) == list(fused.state_dict())
    for key, tensor in fused.state_dict().items():
        assert torch.equal(state[key], tensor), key
