"""Gemma 3 (text, `gemma3_text`) import/export parity against transformers' Gemma3ForCausalLM: Gemma 2's
sandwich norms, (1 + w) RMSNorm, embedding scale and query_pre_attn_scalar, plus qk-norm, five local layers to
one global, and RoPE per layer type (local layers plain at their own base, global ones at rope_theta with a
linear scaling). Every weight is perturbed; the window (4) is shorter than the sequences."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from zoo.config import ModelConfig
from zoo.pretrained import FAMILIES
from zoo.pretrained.roundtrip import effective

LOCAL, GLOBAL = "sliding_attention", "full_attention"
# local base 100 and global 1e4 (stretched x2): far enough apart that swapping them moves the logits
ROPE = {GLOBAL: {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
        LOCAL: {"rope_type": "default", "rope_theta": 100.0}}
SHAPE = dict(hidden_size=32, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=40, vocab_size=99, max_position_embeddings=64, sliding_window=4,
             query_pre_attn_scalar=4, rope_parameters=ROPE)


def tiny_gemma3(scale: float = 0.2, **kw) -> Gemma3ForCausalLM:
    return perturbed(Gemma3ForCausalLM(Gemma3TextConfig(**{**SHAPE, **kw})), scale=scale)


def logits_match(hf, model, vocab: int = 99) -> None:
    right_padded_logits_match(hf, model, vocab)
    left_padded_logits_match(hf, model, vocab)


@pytest.mark.parametrize(("layer_types", "pattern"), [
    (None, ["local"] * 5 + ["global"]),
    ([LOCAL, LOCAL, GLOBAL, LOCAL, LOCAL, GLOBAL], ["local", "local", "global"]),
    # not every k-th layer global (zoo refused this before model.layer_pattern)
    ([GLOBAL, LOCAL, LOCAL, LOCAL, LOCAL, LOCAL], {"prefix": ["global"], "cycle": ["local"]}),
], ids=["five_to_one", "every_third_global", "first_global"])
def test_gemma3_logits_match(tmp_path, layer_types, pattern):
    hf = tiny_gemma3(layer_types=layer_types)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.norm, c.norm_placement, c.mixer.qk_norm, c.embed_scale, c.mixer.scale) == (
        "rmsnorm_1p", "sandwich", True, True, 0.5)
    assert (c.mixer.softcap, c.head.softcap, c.mixer.sliding_window, c.layer_pattern.to_data()) == (
        None, None, 4, pattern)
    rope = c.positional
    assert (rope.base, rope.local_base, rope.scaling.name, rope.scaling.factor) == (1e4, 100.0, "linear", 2.0)
    assert [c.layer_is_local(i) for i in range(6)] == [t == LOCAL for t in hf.config.layer_types]
    logits_match(hf, model)


def test_gemma3_settings_really_act_here(tmp_path):
    """The local base, the global scaling and the window each move these logits far past the tolerance."""
    path = saved(tiny_gemma3(), tmp_path)
    ids = torch.randint(3, 99, (2, 12))
    with torch.no_grad():
        logits = zoo.from_pretrained(path)(ids).logits
        for knob in ({"positional": {"local_base": None}}, {"positional": {"local_base": 1e4}},
                     {"positional": {"scaling": {"factor": 1.0}}}, {"mixer": {"scale": None}}):
            changed = zoo.from_pretrained(path, **knob)(ids).logits
            assert (changed - logits).abs().max() > 0.1, knob


def test_greedy_matches_transformers_generate(tmp_path):
    hf = tiny_gemma3(scale=0.3)  # 6 prompt + 8 new tokens: past the window of 4
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path):
    hf = tiny_gemma3(tie_word_embeddings=False)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    out = export_round_trips(model, Gemma3ForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["model_type"] == "gemma3_text" and written["layer_types"] == hf.config.layer_types
    assert written["rope_parameters"][LOCAL]["rope_theta"] == 100.0
    assert written["rope_parameters"][GLOBAL] == {**ROPE[GLOBAL], "rope_theta": 1e4}
    left_padded_logits_match(Gemma3ForCausalLM.from_pretrained(out).eval(), model)


def test_gemma3_preset_exports_and_loads_in_transformers(tmp_path):
    model = zoo.build("gemma3_1b", vocab_size=64, d_model=32, n_layers=6, n_heads=4, n_kv_heads=2,
                      head_dim=8, d_ff=24, mixer={"sliding_window": 3}, max_seq_len=64).eval()
    with torch.no_grad():
        for p in model.parameters():  # qk-norm and sandwich gains away from their init
            p.add_(torch.randn_like(p) * 0.1)
    out = zoo.save_pretrained(model, tmp_path / "fresh")
    assert json.loads((out / "config.json").read_text())["query_pre_attn_scalar"] == 8
    logits_match(Gemma3ForCausalLM.from_pretrained(out).eval(), model, vocab=64)


def test_published_gemma_3_1b_config_reads_as_the_preset():
    """google/gemma-3-1b-pt's config.json (written by transformers 4.50: rope_theta, rope_local_base_freq,
    sliding_window_pattern, no layer_types, an EOS list) loads as the gemma3_1b preset."""
    published = {"architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                 "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid",
                 "eos_token_id": [1, 106], "final_logit_softcapping": None, "head_dim": 256,
                 "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
                 "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
                 "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
                 "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
                 "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
                 "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144}
    preset = ModelConfig.from_dict(zoo.presets.preset_dict("gemma3_1b"))
    assert effective(FAMILIES.get("gemma3_text")().config_from_hf(published)) == effective(preset)


def test_gemma3_1b_preset_has_the_published_parameter_count():
    """Gemma 3 technical report (arXiv 2503.19786), Table 1: the 1B model has 302M embedding and 698M
    non-embedding parameters; transformers' Gemma3ForCausalLM of the published config counts the same."""
    published = dict(vocab_size=262144, hidden_size=1152, num_hidden_layers=26, num_attention_heads=4,
                     num_key_value_heads=1, head_dim=256, intermediate_size=6912, sliding_window=512,
                     max_position_embeddings=32768)
    with torch.device("meta"):
        ours = zoo.build("gemma3_1b")
        theirs = Gemma3ForCausalLM(Gemma3TextConfig(**published))
    embedding = ours.embed.tokens.weight.numel()
    assert ours.num_parameters() == theirs.num_parameters() == 999_885_952
    assert (round(embedding / 1e6), round((ours.num_parameters() - embedding) / 1e6)) == (302, 698)
    c = ours.config
    assert [c.layer_is_local(i) for i in range(26)] == [t == LOCAL for t in theirs.config.layer_types]


BASE = {"model_type": "gemma3_text", "hidden_size": 32, "num_hidden_layers": 6, "num_attention_heads": 4,
        "intermediate_size": 40, "vocab_size": 99, "head_dim": 8}


def test_settings_zoo_cannot_reproduce_are_named_in_one_error():
    settings = {"attention_bias": True, "use_bidirectional_attention": True,
                "layer_types": [GLOBAL, LOCAL, LOCAL, LOCAL, LOCAL, "chunked_attention"],
                "rope_parameters": {GLOBAL: {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e6},
                                    LOCAL: {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
                                    "chunked_attention": {"rope_type": "default"}}}
    with pytest.raises(ValueError) as err:
        FAMILIES.get("gemma3_text")().config_from_hf({**BASE, **settings})
    message = str(err.value)
    assert message.startswith("gemma3_text config.json uses settings zoo does not support: ")
    for named in ("attention_bias=True", "use_bidirectional_attention=True", "rope_type='dynamic'",
                  f"{LOCAL} rope_type='linear' (supported: default)", "rope_parameters per layer type=False",
                  f"layer_types in ({LOCAL}, {GLOBAL})=False"):
        assert named in message, named


@pytest.mark.parametrize(("overrides", "message"), [
    ({"mixer": {"qk_norm": False}}, r"model.mixer.qk_norm=False \(would load as True\)"),
    ({"positional": {"local_base": None, "scaling": {"name": "linear", "factor": 2.0}}},
     r"model.positional.local_base=None \(would load as 1000000.0\)"),
    ({"norm_placement": "pre"}, r"model.norm_placement='pre' \(would load as 'sandwich'\)"),
])
def test_export_names_what_gemma3_cannot_express(tmp_path, overrides, message):
    model = zoo.build("gemma3_1b", vocab_size=64, d_model=32, n_layers=6, n_heads=4, n_kv_heads=2, head_dim=8,
                      d_ff=24, **overrides)
    with pytest.raises(ValueError, match=rf"cannot be exported as 'gemma3_text'.*{message}"):
        zoo.save_pretrained(model, tmp_path / "x", model_type="gemma3_text")


def test_transformers_4_rope_keys_read_as_transformers_5_reads_them():
    """A 4.x config.json (Gemma 3 4B's text config: rope_theta, rope_local_base_freq and a linear
    rope_scaling of the global layers) loads as transformers 5 reads it, and is written back per layer
    type."""
    legacy = {**BASE, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    family = FAMILIES.get("gemma3_text")()
    cfg = family.config_from_hf(legacy)
    rope = (cfg.positional.base, cfg.positional.local_base, cfg.positional.scaling.name,
            cfg.positional.scaling.factor)
    assert rope == (1e6, 1e4, "linear", 8.0)
    theirs = Gemma3TextConfig(**{k: v for k, v in legacy.items() if k != "model_type"}).rope_parameters
    assert family.config_to_hf(cfg)["rope_parameters"] == theirs
