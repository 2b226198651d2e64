"""T5 import/export parity against transformers' T5ForConditionalGeneration built from tiny random configs:
v1.0 (ReLU, tied head scaled by d_model ** -0.5) and v1.1 (gated-GELU, untied head), d_kv apart from
d_model / num_heads, relative buckets smaller than T5's so short inputs reach the logarithmic ones."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import T5Config, T5ForConditionalGeneration
from transformers.models.t5.modeling_t5 import T5LayerNorm

import zoo
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved
from zoo.generation import generate
from zoo.modules.heads import LMHead
from zoo.modules.norm import RMSNorm

TINY = dict(d_model=32, d_kv=16, d_ff=40, num_layers=2, num_decoder_layers=1, num_heads=4, vocab_size=99,
            relative_attention_num_buckets=8, relative_attention_max_distance=20, decoder_start_token_id=0)
VARIANTS = {  # name -> (feed_forward_proj, head): "tied" v1.0, "untied" v1.1 with its own lm_head,
    "v1.0": ("relu", "tied"),  # "unscaled": transformers 5's T5Config(tie_word_embeddings=False), which
    "v1.1": ("gated-gelu", "untied"),  # ties the head without scaling and stores no lm_head
    "unscaled": ("gated-gelu", "unscaled"),
}


def tiny_t5(variant: str, scale: float = 0.05, **kw) -> T5ForConditionalGeneration:
    proj, head = VARIANTS[variant]
    config = {**TINY, "feed_forward_proj": proj, "tie_word_embeddings": head == "tied", **kw}
    hf = T5ForConditionalGeneration(T5Config(**config))
    if head == "untied":  # a v1.1 checkpoint: a head of its own
        hf.lm_head.weight = torch.nn.Parameter(hf.shared.weight.detach().clone())
    return perturbed(hf, scale=scale)


def compare(hf, model, seed=0, flip_source=False) -> float:
    """Max logit difference on a right-padded (or left-padded) source and a right-padded target batch."""
    src, src_mask = right_padded(3, 11, 99, [11, 7, 3], seed=seed)
    if flip_source:
        src_mask = src_mask.flip(-1)
    tgt, tgt_mask = right_padded(3, 8, 99, [8, 5, 6], seed=seed + 1)
    with torch.no_grad():
        ref = hf(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt,
                 decoder_attention_mask=tgt_mask).logits
        got = model(src, tgt, src_mask, decoder_attention_mask=tgt_mask).logits
    real = tgt_mask.bool()
    return (got[real] - ref[real]).abs().max().item()


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def pair(request, tmp_path_factory):
    hf = tiny_t5(request.param)
    return request.param, hf, zoo.from_pretrained(saved(hf, tmp_path_factory.mktemp(request.param)))


def test_logits_match_with_padding(pair):
    variant, hf, model = pair
    c = model.config
    assert (c.positional.name, c.mixer.scale, c.norm, c.bias) == ("t5_relative", 1.0, "rmsnorm", False)
    assert (c.head_dim, c.positional.buckets, c.positional.max_distance, c.norm_eps) == (16, 8, 20, 1e-6)
    assert c.activation == ("relu" if variant == "v1.0" else "geglu_tanh")
    assert (c.tie_embeddings, c.head.scale) == ((True, 32**-0.5) if variant == "v1.0" else (False, None))
    assert (c.pad_id, c.eos_id, c.start_id) == (0, 1, 0)
    assert compare(hf, model) < 1e-4
    # relative positions: left-padded sources agree too
    assert compare(hf, model, seed=3, flip_source=True) < 1e-4
    if variant == "v1.0":  # the head scale is not a no-op
        model.head.scale = None
        assert compare(hf, model) > 1e-2
        model.head.scale = 32**-0.5


def test_head_scale_is_what_v1_0_needs():
    """LMHead multiplies its input by model.head.scale; without it the tied v1.0 logits are d_model ** 0.5
    times off."""
    cfg = zoo.ModelConfig(d_model=16, n_heads=2, vocab_size=11, head={"scale": 0.25})
    head, x = LMHead(cfg, torch.nn.Embedding(11, 16)), torch.randn(2, 3, 16)
    assert torch.allclose(head(x), x @ head.proj.weight.T * 0.25)
    with pytest.raises(ValueError, match=r"model.head.scale must be > 0"):
        zoo.models.check_config(zoo.ModelConfig(head={"scale": 0.0}))


def test_rmsnorm_equals_t5_layer_norm_in_fp32_and_bf16():
    ours, theirs = RMSNorm(32, eps=1e-6), T5LayerNorm(32, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(32))
        theirs.weight.copy_(ours.weight)
    x = torch.randn(4, 32) * 3
    assert torch.equal(ours(x), theirs(x))
    assert torch.equal(ours.bfloat16()(x.bfloat16()), theirs.bfloat16()(x.bfloat16()))


@pytest.mark.parametrize("variant", ["v1.0", "v1.1"])
def test_greedy_generation_matches_transformers(tmp_path, variant):
    hf = tiny_t5(variant, scale=0.3)  # larger noise: sharper, less tie-prone next-token distributions
    model = zoo.from_pretrained(saved(hf, tmp_path))
    src = torch.randint(3, 99, (3, 7), generator=torch.Generator().manual_seed(6))
    mask = (torch.arange(7)[None] < torch.tensor([[7], [5], [3]])).long()  # sources of different lengths
    src = src.masked_fill(mask == 0, 0)
    greedy = dict(do_sample=False, num_beams=1, max_new_tokens=8, pad_token_id=0)
    with torch.no_grad():  # 1) argmax loop over zoo's forward from the decoder start (pad), no EOS stop
        ref = hf.generate(input_ids=src, attention_mask=mask, eos_token_id=None, **greedy)
        tgt = torch.zeros(3, 1, dtype=torch.long)
        for _ in range(8):
            tgt = torch.cat([tgt, model(src, tgt, mask).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(tgt, ref)
    eos = int(tgt[0, 3])  # 2) zoo.generation.generate (KV cache) with an EOS that row 0 emits third
    with torch.no_grad():
        ref = hf.generate(input_ids=src, attention_mask=mask, eos_token_id=eos, **greedy)
    ours = generate(model, src, attention_mask=mask, eos_token_id=eos, **greedy)
    assert bool((ref[0, 4:] == 0).all())  # the stop really happened
    n = min(ours.shape[1], ref.shape[1])
    assert (torch.equal(ours[:, :n], ref[:, :n]) and bool((ours[:, n:] == 0).all())
            and bool((ref[:, n:] == 0).all()))


def test_export_round_trip_is_exact_and_loads_in_transformers(pair, tmp_path):
    variant, _, model = pair
    out, hf = export_round_trip(model, T5ForConditionalGeneration, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["tie_word_embeddings"], written["scale_decoder_outputs"]) == (variant == "v1.0",) * 2
    assert ("lm_head.weight" in load_file(out / "model.safetensors")) == (variant != "v1.0")
    assert compare(hf, model, seed=8) < 1e-4


@pytest.mark.parametrize(("config", "activation"), [
    ({"feed_forward_proj": "gelu"}, "gelu"),
    ({"feed_forward_proj": "gated-silu"}, "swiglu"),
    ({"feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu"}, "geglu"),  # config.json's dense_act_fn wins
])
def test_other_activations_both_ways(tmp_path, config, activation):
    hf = perturbed(T5ForConditionalGeneration(T5Config(**{**TINY, "num_layers": 1, **config})))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.activation == activation
    assert compare(hf, model) < 1e-4
    back = T5ForConditionalGeneration.from_pretrained(zoo.save_pretrained(model, tmp_path / "export")).eval()
    assert compare(back, model, seed=2) < 1e-4


def test_t5_small_preset_exports(tmp_path):
    model = zoo.build("t5_small", vocab_size=64, d_model=32, n_heads=4, head_dim=8, d_ff=48, encoder_layers=2,
                      decoder_layers=1, head={"scale": 32**-0.5}, dropout=0.0).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh")  # no family named: found by the knobs
    hf = T5ForConditionalGeneration.from_pretrained(out).eval()
    src, tgt = torch.randint(3, 64, (2, 7)), torch.randint(3, 64, (2, 5))
    with torch.no_grad():
        assert (hf(input_ids=src, decoder_input_ids=tgt).logits - model(src, tgt).logits).abs().max() < 1e-4


@pytest.mark.parametrize(("config", "message"), [
    ({"feed_forward_proj": "gated-relu"},
     r"feed_forward_proj='gated-relu' \(dense_act_fn='relu', is_gated_act=True\)"),
    ({"feed_forward_proj": "relu", "is_gated_act": True},
     r"feed_forward_proj='relu' \(dense_act_fn='relu', is_gated_act=True\)"),
    ({"feed_forward_proj": "gelu_fast"},
     r"feed_forward_proj='gelu_fast'.*supported activations: gelu, gelu_new"),
    ({"num_decoder_layers": 0}, r"num_decoder_layers >= 1=False"),
])
def test_unsupported_settings_are_named(config, message):
    with pytest.raises(ValueError, match=message):
        zoo.pretrained.FAMILIES.get("t5")().config_from_hf({"model_type": "t5", **TINY, **config})


def test_checkpoint_tensors_that_do_not_fit_the_config(tmp_path):
    path = saved(tiny_t5("v1.0", num_layers=1), tmp_path)
    tensors = load_file(path / "model.safetensors")
    extra = {"decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight": torch.zeros(8, 4)}
    save_file({**tensors, **extra}, path / "model.safetensors")
    with pytest.warns(UserWarning, match="cross-attention has no position bias"):
        zoo.from_pretrained(path)
    save_file({**tensors, "lm_head.weight": torch.zeros(99, 32)}, path / "model.safetensors")
    with pytest.raises(ValueError, match=r"'lm_head.weight' holds weights different from 'shared.weight'"):
        zoo.from_pretrained(path)


def test_untied_head_with_scale_does_not_export(tmp_path):
    model = zoo.build("t5_small", vocab_size=64, d_model=32, n_heads=4, d_ff=48, encoder_layers=1,
                      decoder_layers=1, tie_embeddings=False)
    with pytest.raises(ValueError, match=r"'t5': .*model.head.scale=0.044\d+ \(would load as None\)"):
        zoo.save_pretrained(model, tmp_path / "x")


def test_another_positional_scheme_is_named_on_export(tmp_path):
    """A family writes its own scheme's keys; a model with another scheme (relative bias as Llama, RoPE as
    T5) is refused naming model.positional, not an AttributeError from the table of the other scheme."""
    t5 = zoo.build("t5_small", vocab_size=64, d_model=32, n_heads=4, d_ff=48, encoder_layers=1,
                   decoder_layers=1, head={"scale": 32**-0.5})
    with pytest.raises(ValueError,
                       match=r"'llama': .*model.positional='t5_relative' \(would load as 'rope'\)"):
        zoo.save_pretrained(t5, tmp_path / "x", model_type="llama")
    rotary = zoo.build("t5_small", vocab_size=64, d_model=32, n_heads=4, d_ff=48, encoder_layers=1,
                       decoder_layers=1, head={"scale": 32**-0.5}, positional="rope")
    with pytest.raises(ValueError, match=r"'t5': .*model.positional='rope' \(would load as 't5_relative'\)"):
        zoo.save_pretrained(rotary, tmp_path / "y", model_type="t5")
