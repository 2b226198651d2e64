"""OPT import/export parity against transformers' OPTForCausalLM: learned positions offset by 2 (read from the
mask by transformers), pre- and post-LN, the optional final LayerNorm, tied and untied heads."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import OPTConfig, OPTForCausalLM, OPTModel

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, right_padded, saved

OPT = zoo.pretrained.FAMILIES.get("opt")()


def tiny_opt(scale: float = 0.05, **kw):
    cfg = OPTConfig(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=40,
                              vocab_size=99, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                              eos_token_id=2), **kw})
    return perturbed(OPTForCausalLM(cfg), scale=scale)


@pytest.mark.parametrize(("kw", "placement", "final"), [
    ({}, "pre", True),
    ({"do_layer_norm_before": False}, "post", False),
    ({"_remove_final_layer_norm": True}, "pre", False),
], ids=["pre", "post", "pre_no_final_norm"])
def test_logits_match_with_right_and_left_padding(tmp_path, kw, placement, final):
    hf = tiny_opt(**kw)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    cfg = model.config
    assert ((cfg.norm_placement, cfg.final_norm, cfg.positional.offset, cfg.activation)
            == (placement, final, 2, "relu"))
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)  # both given position_ids = cumsum(mask) - 1
    left_padded_logits_match(hf, model, hf_positions=False)  # transformers' own positions from the mask agree


def test_right_padding_positions_agree_at_real_tokens_only(tmp_path):
    """transformers gives right-pad tokens position -1 (row 1 of the table); zoo numbers them on (len, len+1,
    ...). Real tokens read the same rows, so they agree and the pads, which no real token attends to,
    differ."""
    hf = tiny_opt()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    ids, mask = right_padded(2, 8, 99, [8, 5])
    with torch.no_grad():
        diff = (model(ids, attention_mask=mask).logits - hf(input_ids=ids, attention_mask=mask).logits).abs()
    # every pad row differs
    assert diff[mask.bool()].max() < 1e-4 and diff[~mask.bool()].amax(-1).min() > 1e-3


def test_greedy_generation_matches_transformers(tmp_path):
    hf = tiny_opt(scale=0.3)  # larger noise: sharper, less tie-prone next-token distributions
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("kw", [{}, {"tie_word_embeddings": False, "activation_function": "gelu"},
                                {"do_layer_norm_before": False}], ids=["tied", "untied_gelu", "post"])
def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path, kw):
    hf = tiny_opt(**kw)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    out = export_round_trips(model, OPTForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["do_layer_norm_before"] == kw.get("do_layer_norm_before", True)
    assert (written["word_embed_proj_dim"] == 32
            and written["tie_word_embeddings"] == kw.get("tie_word_embeddings", True))


def test_original_opt_files_without_the_model_prefix_load_as_the_causal_lm(tmp_path):
    """The original facebook/opt-* files name OPTForCausalLM but store OPTModel's `decoder.*` names (no
    `model.` prefix, the tied head left out). An OPTModel folder that says OPTModel loads bare
    (test_decoder_heads.py)."""
    hf = tiny_opt()
    bare = OPTModel(hf.config)
    bare.load_state_dict(hf.model.state_dict())
    folder = saved(bare, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["OPTForCausalLM"]}))
    model = zoo.from_pretrained(folder)
    assert model.config.head.name == "lm"
    right_padded_logits_match(hf, model)


@pytest.mark.parametrize(("change", "message"), [
    ({"word_embed_proj_dim": 16},
     r"word_embed_proj_dim "
     r"\(token width apart from hidden_size: project_in/project_out\)=16 \(supported: 32\)"),
    ({"enable_bias": False}, r"enable_bias=False \(supported: True\)"),
    ({"layer_norm_elementwise_affine": False}, r"layer_norm_elementwise_affine=False \(supported: True\)"),
    ({"activation_function": "gelu_fast"}, r"opt config.json .*activation_function='gelu_fast' \(supp"),
])
def test_settings_zoo_cannot_reproduce_are_named(change, message):
    hf = {"model_type": "opt", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "ffn_dim": 40, "vocab_size": 99, **change}
    with pytest.raises(ValueError, match=message):
        OPT.config_from_hf(hf)


def test_opt_preset_exports_and_a_post_ln_final_norm_does_not(tmp_path):
    model = zoo.build("opt_125m", vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_ff=24,
                      max_seq_len=32).eval()
    hf = OPTForCausalLM.from_pretrained(zoo.save_pretrained(model, tmp_path / "fresh",
                                                            model_type="opt")).eval()
    right_padded_logits_match(hf, model, vocab=64)
    post = zoo.build("opt_125m", vocab_size=64, d_model=32, n_layers=1, n_heads=4, norm_placement="post",
                     final_norm=True)
    with pytest.raises(ValueError, match=r"'opt'.*model.final_norm=True \(would load as False\)"):
        zoo.save_pretrained(post, tmp_path / "x", model_type="opt")
