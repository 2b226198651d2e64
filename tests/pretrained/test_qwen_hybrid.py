"""The Qwen hybrids (Qwen3.5 text, the text part of a Qwen3.5 vision-language folder, Qwen3-Next with its MoE)
import/export parity against transformers built from small configs, every weight perturbed (A_log, dt_bias,
the zero-centred (1 + w) norms, the gated norm, the conv taps): three Gated DeltaNet layers then one gated
attention layer with a partial RoPE (and Qwen3.5's mrope sections, which text positions leave plain);
logits within 1e-4 on right- and left-padded batches, greedy tokens equal (cached), the export read back by
transformers with equal logits, every head the families ship, and what zoo cannot express named in one
error."""

from __future__ import annotations

import json
import re

import pytest
import torch
import transformers
from transformers import (
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from zoo.modules.attention import Attention
from zoo.modules.gated_deltanet import GatedDeltaNet
from zoo.modules.moe import MoE

ROPE = {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5}
BASE = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=40, vocab_size=99, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=3,
            max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# Qwen3.5's rope keys carry the vision model's sections: 4 rotated pairs per head split [2, 1, 1], interleaved
QWEN3_5 = dict(BASE, rope_parameters={**ROPE, "mrope_section": [2, 1, 1], "mrope_interleaved": True})
QWEN3_NEXT = dict(BASE, rope_parameters=ROPE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12,
                  shared_expert_intermediate_size=24, mlp_only_layers=[1])
EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12,
               shared_expert_intermediate_size=24)
QWEN3_5_MOE = {**{k: v for k, v in QWEN3_5.items() if k != "intermediate_size"}, **EXPERTS}
FAMILIES = {  # model_type -> (config class, model class, config, which layers are MoE)
    "qwen3_5_text": (Qwen3_5TextConfig, Qwen3_5ForCausalLM, QWEN3_5, [False] * 4),
    "qwen3_next": (Qwen3NextConfig, Qwen3NextForCausalLM, QWEN3_NEXT, [True, False, True, True]),
    "qwen3_5_moe_text": (Qwen3_5MoeTextConfig, Qwen3_5MoeForCausalLM, QWEN3_5_MOE, [True] * 4),
}
MIXERS = [GatedDeltaNet, GatedDeltaNet, GatedDeltaNet, Attention]


def tiny(model_type: str, scale: float = 0.1, model_class=None, **kw):
    config_class, default_class, config, _ = FAMILIES[model_type]
    torch.manual_seed(0)
    hf = perturbed((model_class or default_class)(config_class(**{**config, **kw})), scale=scale)
    with torch.no_grad():  # routers far from ties: the choice of experts does not hang on rounding
        base = hf.base_model
        for layer in getattr(base, "language_model", base).layers:
            gate = getattr(getattr(layer, "mlp", None), "gate", None)
            if gate is not None:
                gate.weight.normal_(0, 1.0)
    return hf


@pytest.mark.parametrize("model_type", FAMILIES)
def test_logits_match_on_padded_batches(tmp_path, model_type):
    hf = tiny(model_type)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    layers = model.decoder_stack.layers
    assert [type(layer.self_attn) for layer in layers] == MIXERS
    assert [isinstance(layer.ffn, MoE) for layer in layers] == FAMILIES[model_type][3]
    assert model.config.norm == "rmsnorm_1p" and model.config.mixer.output_gate
    assert model.config.positional.fraction == 0.5
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_greedy_matches_transformers_generate(tmp_path, model_type):
    hf = tiny(model_type, scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_export_round_trip(tmp_path, model_type):
    hf = tiny(model_type, layer_types=["linear_attention", "full_attention"] * 2)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.layer_pattern.to_data()[:2] in (["linear", "full"], ["linear+moe", "full+dense"])
    out = export_round_trips(model, FAMILIES[model_type][1], tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["layer_types"] == ["linear_attention", "full_attention"] * 2
    assert written["linear_conv_kernel_dim"] == 3


VISION = dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=32, patch_size=4,
              num_position_embeddings=16)
VISION_LANGUAGE = {  # model_type -> (config class, model class, text config, the text class it exports as)
    "qwen3_5": (Qwen3_5Config, Qwen3_5ForConditionalGeneration, QWEN3_5, Qwen3_5ForCausalLM),
    "qwen3_5_moe": (Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration, QWEN3_5_MOE, Qwen3_5MoeForCausalLM),
}


@pytest.mark.parametrize("model_type", VISION_LANGUAGE)
def test_vision_language_folder_loads_its_text_model(tmp_path, model_type):
    """A `qwen3_5` / `qwen3_5_moe` folder (*ForConditionalGeneration): zoo reads text_config and the language
    model's tensors with transformers' logits on text, passes the vision tower over with a warning, and
    exports the text model, which its *ForCausalLM reads back with the same logits."""
    config_class, model_class, text, text_class = VISION_LANGUAGE[model_type]
    torch.manual_seed(0)
    config = config_class(text_config=text, vision_config=VISION, tie_word_embeddings=False)
    hf = perturbed(model_class(config), scale=0.1)
    with torch.no_grad():  # routers far from ties
        for layer in hf.model.language_model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.weight.normal_(0, 1.0)
    with pytest.warns(UserWarning, match=r"the vision tower \(model.visual.\*\)"):
        model = zoo.from_pretrained(saved(hf, tmp_path))
    assert [type(layer.self_attn) for layer in model.decoder_stack.layers] == MIXERS
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    out = export_round_trips(model, text_class, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["model_type"], written["architectures"]) == (f"{model_type}_text", [text_class.__name__])


HEADS = [  # (model_type, transformers class, zoo head, output compared)
    ("qwen3_5_text", "Qwen3_5TextModel", "none", "last_hidden_state"),
    ("qwen3_5_text", "Qwen3_5TextForSequenceClassification", "classifier", "logits"),
    ("qwen3_next", "Qwen3NextModel", "none", "last_hidden_state"),
    ("qwen3_next", "Qwen3NextForSequenceClassification", "classifier", "logits"),
    ("qwen3_next", "Qwen3NextForTokenClassification", "token_classifier", "logits"),
    ("qwen3_next", "Qwen3NextForQuestionAnswering", "qa", "start_logits"),
    ("qwen3_5_moe_text", "Qwen3_5MoeTextModel", "none", "last_hidden_state"),
]


@pytest.mark.parametrize("model_type, class_name, head, output", HEADS, ids=[h[1] for h in HEADS])
def test_every_head_loads_and_exports(tmp_path, model_type, class_name, head, output):
    """Each class the families ship loads as its zoo head with transformers' outputs (right-padded batch) and
    exports as the same class, which transformers reads back with the same outputs."""
    hf_class = getattr(transformers, class_name)
    hf = tiny(model_type, model_class=hf_class, num_hidden_layers=2, num_labels=3,
              layer_types=["linear_attention", "full_attention"])
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == head
    ids = torch.randint(3, 99, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    ids[1, 5:] = 0
    real = mask.bool() if output != "logits" or head == "token_classifier" else slice(None)

    def compare(reference):
        with torch.no_grad():
            ref = getattr(reference(input_ids=ids, attention_mask=mask), output)
            got = getattr(model(ids, attention_mask=mask), output)
        assert (got[real] - ref[real]).abs().max() < 1e-4

    compare(hf)
    out = zoo.save_pretrained(model, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["architectures"] == [class_name]
    compare(hf_class.from_pretrained(out).eval())


@pytest.mark.parametrize("model_type, settings, named", [
    ("qwen3_5_text", {"attention_bias": True, "layer_types": ["linear_attention", "sliding_attention"],
                      "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}},
     ["rope_type='yarn'", "attention_bias=True",
      "layer_types (linear_attention or full_attention, one per layer)=False"]),
    ("qwen3_next", {"full_attention_interval": 0, "decoder_sparse_step": 0},
     ["full_attention_interval (a positive integer)=False",
      "decoder_sparse_step (a positive integer)=False"]),
])
def test_what_zoo_cannot_express_is_one_error(model_type, settings, named):
    family = zoo.pretrained.FAMILIES.get(model_type)()
    hf = {"model_type": model_type, **FAMILIES[model_type][2], "num_hidden_layers": 2, **settings}
    with pytest.raises(ValueError, match=re.escape(f"{model_type} config.json uses settings zoo does not "
                                                   "support")) as err:
        family.config_from_hf(hf)
    assert all(name in str(err.value) for name in named), str(err.value)


def test_layer_types_default_to_every_fourth_layer_full_and_mrope_is_not_read():
    """Without layer_types, every full_attention_interval-th layer is attention (transformers' default); the
    mrope sections read as the same model as none."""
    family = zoo.pretrained.FAMILIES.get("qwen3_5_text")()
    plain = {"model_type": "qwen3_5_text", **BASE, "num_hidden_layers": 6, "rope_parameters": ROPE,
             "full_attention_interval": 3}
    cfg = family.config_from_hf(plain)
    assert [cfg.layer_is_linear(i) for i in range(6)] == [True, True, False] * 2
    assert family.config_from_hf({**plain, "rope_parameters": QWEN3_5["rope_parameters"]}) == cfg
    all_full = family.config_from_hf({**plain, "layer_types": ["full_attention"] * 6})
    assert all_full.linear_mixer is None and not any(map(all_full.layer_is_linear, range(6)))


def test_a_hybrid_built_in_zoo_exports_as_qwen3_5_text(tmp_path):
    """A Qwen3.5-shaped model built from scratch (its chunk size its own: how the recurrence is split, not
    what it computes) finds its family by itself and transformers reads the export with zoo's logits."""
    torch.manual_seed(0)
    model = zoo.build("qwen3_5_small", d_model=32, n_layers=4, head_dim=8, d_ff=48, vocab_size=99,
                      linear_mixer={"linear_key_head_dim": 8, "linear_value_head_dim": 8, "chunk_size": 4},
                      init_std=0.2).eval()
    out = zoo.save_pretrained(model, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3_5_text"
    right_padded_logits_match(Qwen3_5ForCausalLM.from_pretrained(out).eval(), model)


def test_qwen3_5_moe_is_moe_everywhere_and_renormalised_whatever_config_json_says():
    """transformers' Qwen3_5MoeTextConfig has no norm_topk_prob, mlp_only_layers or decoder_sparse_step: given
    anyway, its model still routes every layer and renormalises; zoo reads the same."""
    given = dict(QWEN3_5_MOE, norm_topk_prob=False, mlp_only_layers=[1], decoder_sparse_step=2)
    hf_config = Qwen3_5MoeTextConfig(**given)
    assert all(hasattr(layer.mlp, "experts") for layer in Qwen3_5MoeForCausalLM(hf_config).model.layers)
    family = zoo.pretrained.FAMILIES.get("qwen3_5_moe_text")()
    cfg = family.config_from_hf({"model_type": "qwen3_5_moe_text", **given})
    assert cfg.ffn.router.name == "softmax_topk_norm" and all(map(cfg.layer_is_moe, range(4)))
    assert not {"norm_topk_prob", "mlp_only_layers", "decoder_sparse_step"} & set(family.config_to_hf(cfg))


def test_a_text_config_that_is_not_a_mapping_is_named():
    family = zoo.pretrained.FAMILIES.get("qwen3_5")()
    message = "qwen3_5 config.json's text_config must be a mapping of the text model's keys; got list"
    with pytest.raises(ValueError, match=re.escape(message)):
        family.config_from_hf({"model_type": "qwen3_5", "text_config": [QWEN3_5]})


def test_multi_token_prediction_tensors_are_passed_over(tmp_path):
    """The Hub's Qwen3.5 / Qwen3-Next folders hold a multi-token-prediction block (`mtp.*`), which
    transformers does not build: zoo loads the model without it, with transformers' logits, and warns that it
    left it."""
    from safetensors.torch import load_file, save_file

    hf = tiny("qwen3_5_text")
    path = saved(hf, tmp_path)
    weights = load_file(path / "model.safetensors")
    d = hf.config.hidden_size
    mtp = {"mtp.fc.weight": torch.zeros(d, 2 * d), "mtp.norm.weight": torch.zeros(d),
           "mtp.layers.0.input_layernorm.weight": torch.zeros(d),
           "mtp.layers.0.self_attn.q_proj.weight": weights["model.layers.3.self_attn.q_proj.weight"].clone()}
    save_file({**weights, **mtp}, path / "model.safetensors", metadata={"format": "pt"})
    ignored = r"Ignoring 4 tensor\(s\).*multi-token-prediction layers \(mtp\.\*\)"
    with pytest.warns(UserWarning, match=ignored):
        model = zoo.from_pretrained(path)
    right_padded_logits_match(hf, model)
