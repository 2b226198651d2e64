"""OLMo-hybrid (`olmo_hybrid`) import/export parity against transformers built from small configs, every
weight perturbed (A_log, dt_bias, the layer norms, q/k norms, the gated output norm, the conv taps): Gated
DeltaNet layers (pre-norm, beta times 2, q/k/v stored apart) around an OLMo 2-style attention layer (norms on
the sub-layers' outputs); logits within 1e-4 on right- and left-padded batches, greedy tokens equal (cached),
the export read back by transformers with equal logits, both heads the family ships, and what zoo cannot
express named in one error."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch
import transformers
from transformers import OlmoHybridConfig, OlmoHybridForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from zoo.models.base import build_model
from zoo.modules.attention import Attention
from zoo.modules.gated_deltanet import GatedDeltaNet

# rms_norm_eps far from the gated norm's fixed 1e-5, so reading the wrong epsilon shows
TINY = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=40, vocab_size=99, linear_num_key_heads=2, linear_num_value_heads=2,
            linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=3, rms_norm_eps=1e-2,
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tiny(scale: float = 0.1, model_class=OlmoHybridForCausalLM, **kw):
    torch.manual_seed(0)
    return perturbed(model_class(OlmoHybridConfig(**{**TINY, **kw})), scale=scale)


def test_logits_match_on_padded_batches(tmp_path):
    hf = tiny()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    cfg = model.config
    kinds = [type(layer.self_attn) for layer in model.decoder_stack.layers]
    assert kinds == [GatedDeltaNet] * 3 + [Attention]
    assert [cfg.layer_norm_placement(i) for i in range(4)] == ["pre"] * 3 + ["post_sublayer"]
    assert cfg.linear_mixer.linear_allow_neg_eigval and cfg.linear_mixer.output_norm_eps == 1e-5
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_greedy_matches_transformers_generate(tmp_path):
    hf = tiny(scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_export_round_trip(tmp_path):
    hf = tiny(layer_types=["linear_attention", "full_attention"] * 2, linear_allow_neg_eigval=False)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.layer_pattern.to_data() == ["linear", "full"]
    assert not model.config.linear_mixer.linear_allow_neg_eigval
    out = export_round_trips(model, OlmoHybridForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["layer_types"] == ["linear_attention", "full_attention"] * 2
    assert (written["linear_conv_kernel_dim"], written["linear_allow_neg_eigval"]) == (3, False)


def test_the_bare_model_loads_and_exports(tmp_path):
    """OlmoHybridModel (zoo head none): transformers' last hidden state, and the export is the same class."""
    hf = tiny(model_class=transformers.OlmoHybridModel, num_hidden_layers=2,
              layer_types=["linear_attention", "full_attention"])
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == "none"
    ids = torch.randint(3, 99, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0

    def compare(reference):
        with torch.no_grad():
            ref = reference(input_ids=ids, attention_mask=mask).last_hidden_state
            got = model(ids, attention_mask=mask).last_hidden_state
        assert (got[mask.bool()] - ref[mask.bool()]).abs().max() < 1e-4

    compare(hf)
    out = zoo.save_pretrained(model, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["OlmoHybridModel"]
    compare(transformers.OlmoHybridModel.from_pretrained(out).eval())


def test_layer_types_default_as_transformers_fills_them():
    """Without layer_types: every fourth layer attention, and the last when that leaves none; the linear sizes
    as OlmoHybridConfig derives them (heads as attention's, key 3/4 of the width over them, value twice)."""
    family = zoo.pretrained.FAMILIES.get("olmo_hybrid")()
    plain = {k: v for k, v in TINY.items() if not k.startswith("linear_")}
    for n in (2, 6):
        cfg = family.config_from_hf({"model_type": "olmo_hybrid", **plain, "num_hidden_layers": n})
        expected = OlmoHybridConfig(**{**plain, "num_hidden_layers": n})
        assert [cfg.layer_is_linear(i) for i in range(n)] == [t == "linear_attention"
                                                             for t in expected.layer_types]
        s = cfg.linear_mixer
        assert (s.linear_num_key_heads, s.linear_num_value_heads, s.linear_key_head_dim,
                s.linear_value_head_dim) == (expected.linear_num_key_heads, expected.linear_num_value_heads,
                                             expected.linear_key_head_dim, expected.linear_value_head_dim)


def test_what_zoo_cannot_express_is_one_error():
    family = zoo.pretrained.FAMILIES.get("olmo_hybrid")()
    hf = {"model_type": "olmo_hybrid", **TINY, "attention_bias": True, "hidden_act": "gelu",
          "linear_num_value_heads": 4, "layer_types": ["linear_attention", "sliding_attention"] * 2,
          "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}}
    message = "olmo_hybrid config.json uses settings zoo does not support"
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        family.config_from_hf(hf)
    named = ["attention_bias=True", "hidden_act='gelu'", "rope_type='yarn'",
             "layer_types (linear_attention or full_attention, one per layer)=False"]
    assert all(name in str(err.value) for name in named), str(err.value)
    with pytest.raises(ValueError, match=re.escape("linear_num_value_heads == linear_num_key_heads")):
        family.config_from_hf({"model_type": "olmo_hybrid", **TINY, "linear_num_value_heads": 4})
    rope = {"rope_type": "default", "rope_theta": None}
    nope = {"model_type": "olmo_hybrid", **TINY, "rope_parameters": rope}
    message = "rope_parameters.rope_theta given (null: attention without RoPE)=False"
    with pytest.raises(ValueError, match=re.escape(message)):  # no TypeError from float(None)
        family.config_from_hf(nope)


def test_a_hybrid_without_the_linear_layers_wiring_is_refused_on_export(tmp_path):
    """A Gated DeltaNet hybrid whose linear layers keep the spine's post_sublayer wiring is not OLMo-hybrid:
    export names the key instead of writing a folder transformers would read differently."""
    model = zoo.from_pretrained(saved(tiny(), tmp_path))
    cfg = model.config
    other = dataclasses.replace(cfg, linear_mixer=dataclasses.replace(cfg.linear_mixer, norm_placement=None))
    message = "cannot be exported as 'olmo_hybrid': its config.json cannot express model.linear_mixer="
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        zoo.save_pretrained(build_model(other), tmp_path / "export", model_type="olmo_hybrid")
    assert "'norm_placement': None} (would load as {" in str(err.value)


def test_a_file_under_the_modules_names_loads(tmp_path):
    """A folder whose tensors carry the modules' own names (`input_layernorm`, `post_attention_layernorm`, one
    fused `conv1d`), which transformers also loads, gives the same model as the stored names."""
    from safetensors.torch import save_file

    hf = tiny()
    path = saved(hf, tmp_path)
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, path / "model.safetensors",
              metadata={"format": "pt"})
    assert "model.layers.0.linear_attn.conv1d.weight" in hf.state_dict()
    model = zoo.from_pretrained(path)
    right_padded_logits_match(OlmoHybridForCausalLM.from_pretrained(path).eval(), model)
    right_padded_logits_match(hf, model)


def test_a_hybrid_built_in_zoo_exports_as_olmo_hybrid(tmp_path):
    """An OLMo-hybrid-shaped model built from scratch (the 7B preset made small) finds its family by itself,
    and transformers reads the export (q / k / v convolution pieces at their widths) with zoo's logits."""
    torch.manual_seed(0)
    linear = {"linear_num_key_heads": 2, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
              "linear_value_head_dim": 12, "chunk_size": 4}
    model = zoo.build("olmo_hybrid_7b", d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=48,
                      vocab_size=99, linear_mixer=linear, init_std=0.2).eval()
    out = zoo.save_pretrained(model, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["model_type"] == "olmo_hybrid"
    from safetensors.torch import load_file

    stored = load_file(out / "model.safetensors")
    assert [stored[f"model.layers.0.linear_attn.{p}_conv1d.weight"].shape[0] for p in "qkv"] == [16, 16, 24]
    right_padded_logits_match(OlmoHybridForCausalLM.from_pretrained(out).eval(), model)
