"""The parts that own their config (issue 35): model.positional (with its RoPE scaling), model.mixer and
model.layer_pattern are typed settings; a name chooses an entry with its defaults, another name replaces the
subtree, a key of another entry is refused naming its reader; the flat layout before them upgrades when read
from a saved config and is refused, naming the new key, when a user gives it. Also renders docs/design.md's
key table of the parts (`python -m tests.test_config_parts`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
from tests.doc_tables import cell, replace_between, rewrite
from zoo.config import ModelConfig, lay_over, nest_paths
from zoo.config_moved import MOVED, moved_override, upgrade_saved
from zoo.modules.ffn_settings import FFN, ROUTER
from zoo.modules.head_settings import HEAD
from zoo.modules.layer_pattern import LayerPattern
from zoo.modules.mixer_settings import MIXER
from zoo.modules.mtp_settings import MTP
from zoo.modules.positional_settings import POSITIONAL, ROPE_SCALING, Llama3ScalingSettings, RopeSettings

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "design.md"
START, END = "<!-- parts table start -->", "<!-- parts table end -->"


def test_a_name_alone_is_the_entry_with_its_defaults() -> None:
    assert POSITIONAL.parse("rope") == RopeSettings()
    assert ModelConfig(positional="rope").positional.base == 10000.0


def test_a_mapping_sets_keys_and_nests_the_scaling() -> None:
    rope = POSITIONAL.parse({"name": "rope", "base": 5e5,
                             "scaling": {"name": "llama3", "factor": 32, "original_max_len": 8192}})
    assert rope.scaling == Llama3ScalingSettings(factor=32, original_max_len=8192)
    assert POSITIONAL.parse(rope.to_data()) == rope  # the stored form reads back


def test_a_key_of_another_entry_names_its_reader() -> None:
    with pytest.raises(ValueError, match=r"model.positional=rope has no key 'offset'.*positional=learned"):
        POSITIONAL.parse({"name": "rope", "offset": 2})
    with pytest.raises(ValueError, match=r"scaling=yarn has no key 'low_freq_factor'.*scaling=llama3"):
        POSITIONAL.parse({"name": "rope", "scaling": {"name": "yarn", "low_freq_factor": 2}})


def test_a_misspelled_key_or_name_or_bad_value_is_named() -> None:
    with pytest.raises(ValueError, match="Did you mean 'base'"):
        POSITIONAL.parse({"name": "rope", "bse": 3})
    with pytest.raises(ValueError, match="Unknown positional 'ropee'. Did you mean 'rope'"):
        POSITIONAL.parse("ropee")
    with pytest.raises(ValueError, match="model.positional.fraction must be"):
        POSITIONAL.parse({"name": "rope", "fraction": 1.5})
    with pytest.raises(ValueError, match="model.mixer.sliding_window must be a positive integer"):
        MIXER.parse({"sliding_window": 0})


def test_merge_changes_keys_and_another_name_replaces() -> None:
    rope = POSITIONAL.parse({"name": "rope", "base": 5e5, "scaling": {"name": "yarn", "factor": 4,
                                                                      "original_max_len": 64}})
    merged = POSITIONAL.merge(rope, {"scaling": {"factor": 8}})
    assert (merged.base, merged.scaling.factor, merged.scaling.original_max_len) == (5e5, 8, 64)
    assert POSITIONAL.merge(rope, "alibi").to_data() == {"name": "alibi"}
    assert POSITIONAL.merge(rope, {"name": "learned", "offset": 2}).to_data() == {
        "name": "learned", "offset": 2, "skip_pads": False}


def test_build_overrides_merge_into_the_preset_part() -> None:
    cfg = zoo.resolve_config("llama3_2_1b", positional={"base": 1e6})
    assert cfg.positional.base == 1e6 and cfg.positional.scaling.factor == 32.0  # the preset's scaling kept
    assert lay_over({"positional": "rope"}, {"positional": "alibi"})["positional"] == "alibi"


def test_nest_paths_is_what_family_tables_write() -> None:
    nested = nest_paths({"positional": "rope", "positional.base": 1e6, "positional.scaling.name": "yarn",
                         "mixer.qk_norm": True, "d_model": 8})
    assert nested == {"positional": {"name": "rope", "base": 1e6, "scaling": {"name": "yarn"}},
                      "mixer": {"qk_norm": True}, "d_model": 8}


@pytest.mark.parametrize(("layers", "local", "rotates", "moe"), [
    ([], [True] * 4, [True] * 4, [True] * 4),
    (["local", "global"], [True, False, True, False], [True] * 4, [True] * 4),
    (["rope", "rope", "rope", "nope"], [True] * 4, [True, True, True, False], [True] * 4),
    ({"prefix": ["dense"], "cycle": ["moe"]}, [True] * 4, [True] * 4, [False, True, True, True]),
    (["global+dense", "local+moe"], [False, True] * 2, [True] * 4, [False, True] * 2),
])
def test_the_layer_pattern_answers_per_layer(layers, local, rotates, moe) -> None:
    cfg = ModelConfig(n_layers=4, positional="rope", ffn="moe", mixer={"sliding_window": 4},
                      layer_pattern=layers)
    assert [cfg.layer_is_local(i) for i in range(4)] == local
    assert [cfg.layer_rotates(i) for i in range(4)] == rotates
    assert [cfg.layer_is_moe(i) for i in range(4)] == moe


def test_from_layers_finds_the_shortest_cycle() -> None:
    assert LayerPattern.from_layers(["local"] * 5 + ["global"] + ["local"] * 5 + ["global"]).cycle == \
        ("local",) * 5 + ("global",)
    assert LayerPattern.from_layers(["global", "local", "local"] * 3 + ["global"]).cycle == \
        ("global", "local", "local")


@pytest.mark.parametrize(("layers", "message"), [
    (["local", "global"], "needs model.mixer.sliding_window"),
    (["rope", "nope"], "needs a rotary scheme"),
    (["dense", "moe"], "needs model.ffn=moe"),
    (["locl"], "unknown layer tag 'locl'. Did you mean 'local'"),
    (["local+global"], "two tags of one dimension"),
])
def test_a_tag_the_config_cannot_honour_is_refused(layers, message) -> None:
    with pytest.raises(ValueError, match=message):
        zoo.build("gpt_nano", layer_pattern=layers)


def test_old_flat_keys_are_refused_naming_the_new_place() -> None:
    with pytest.raises(ValueError, match=r"model.rope_base is now model.positional.base"):
        ModelConfig.from_dict({"positional": "rope", "rope_base": 1e6})
    with pytest.raises(ValueError, match=r"model.moe is now model.ffn: \{name: moe"):
        zoo.build("moe_small", moe={"every": 2})
    assert moved_override(["model.moe.every=2"]).startswith("model.moe.every is now model.layer_pattern")
    assert moved_override(["+model.moe.aux_coef=0.1"]).startswith(
        "model.moe.aux_coef is now model.ffn.balance.aux")
    assert moved_override(["model.moe.router=sigmoid_bias"]).startswith(
        "model.moe.router is now model.ffn.router")
    assert moved_override(["model=gemma3_1b", "model.global_every=6"]).startswith(
        "model.global_every is now model.layer_pattern")
    assert moved_override(["model.d_model=8", "model.positional.base=3"]) is None


def test_the_command_line_names_the_new_key() -> None:
    out = subprocess.run([sys.executable, "train.py", "model=gpt_nano", "model.attn_softcap=30"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stderr.strip() == (
        "error: model.attn_softcap is now model.mixer.softcap (each part owns its keys since issue 35; "
        "docs/design.md, \"Config parts\").")


def _old_gemma3_like() -> dict:
    """A config as the flat layout saved it (every key at its value, the unread ones at their defaults)."""
    return {"arch": "decoder", "vocab_size": 64, "d_model": 16, "n_layers": 4, "n_heads": 2, "n_kv_heads": 1,
            "head_dim": 8, "qk_norm": True, "qk_norm_scope": "head", "attn_scale": None, "attn_softcap": 50.0,
            "attn_sinks": False, "sliding_window": 3, "global_every": 2, "global_first": False,
            "positional": "rope", "pos_offset": 0, "pos_skip_pads": False, "sinusoidal_layout": "interleaved",
            "rope_base": 1e6, "rope_local_base": 1e4, "rope_layout": "half", "rope_fraction": 1.0,
            "nope_every": 0, "rope_scaling": "yarn", "rope_factor": 4.0, "rope_low_freq_factor": 1.0,
            "rope_high_freq_factor": 4.0, "rope_truncate": False, "rope_original_max_len": 32,
            "rope_short_factor": None, "rope_long_factor": None, "rel_buckets": 32, "rel_max_distance": 128,
            "qkv_bias": None, "max_seq_len": 128, "norm": "rmsnorm", "bias": False}


def test_a_saved_flat_config_upgrades_to_the_same_model() -> None:
    """Every knob of the flat layout lands where the new code reads it: the per-layer answers and the built
    model's logits equal a config written in the new layout by hand."""
    upgraded = ModelConfig.from_dict(upgrade_saved(_old_gemma3_like()))
    by_hand = ModelConfig(
        vocab_size=64, d_model=16, n_layers=4, n_heads=2, n_kv_heads=1, head_dim=8, norm="rmsnorm",
        bias=False, max_seq_len=128, mixer={"qk_norm": True, "softcap": 50.0, "sliding_window": 3},
        positional={"name": "rope", "base": 1e6, "local_base": 1e4,
                    "scaling": {"name": "yarn", "factor": 4.0, "original_max_len": 32, "truncate": False}},
        layer_pattern=["local", "global"])
    assert upgraded == by_hand
    torch.manual_seed(0)
    a = zoo.build(upgraded)
    b = zoo.build(by_hand)
    b.load_state_dict(a.state_dict())
    ids = torch.randint(0, 64, (2, 12))
    assert torch.equal(a(ids).logits, b(ids).logits)


def test_upgrade_leaves_the_new_layout_alone() -> None:
    new = ModelConfig(positional="rope", layer_pattern=["rope", "nope"]).to_dict()
    assert upgrade_saved(new) == new
    assert set(MOVED).isdisjoint(new)


def render() -> str:
    """Each part's entries and keys, from the settings classes (the declarations are the source)."""
    rows = ["| part | entry | key | allowed | default |", "|---|---|---|---|---|"]
    for table in (MIXER, POSITIONAL, ROPE_SCALING, FFN, ROUTER, HEAD, MTP):
        for entry, keys in table.docs().items():
            if not keys:
                rows.append(f"| `model.{table.key}` | `{entry}` | (none) | | |")
            for key, (allowed, default) in keys.items():
                if isinstance(default, dict) and "name" in default:
                    allowed, default = "a name or a mapping (the row below)", default.get("name")
                rows.append(f"| `model.{table.key}` | `{entry}` | `{key}` | {cell(allowed)} | `{default}` |")
    return f"{START}\n" + "\n".join(rows) + f"\n{END}"


def test_the_docs_table_is_rendered_from_the_declarations() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert replace_between(text, START, END, render()) == text, "run python -m tests.test_config_parts"


if __name__ == "__main__":
    rewrite(DOC, START, END, render)


@pytest.mark.parametrize(("overrides", "part", "want"), [
    (["model=gpt_nano", "model.positional=rope", "model.positional.base=5"], "positional",
     RopeSettings(base=5)),
    (["model=gpt_nano", "model.positional={name:rope,fraction:0.5}", "model.positional.base=5"], "positional",
     RopeSettings(base=5, fraction=0.5)),
    (["model=llama3_2_1b", "model.positional.scaling=linear", "model.positional.scaling.factor=2"],
     "positional", RopeSettings(base=500000.0, scaling=ROPE_SCALING.parse({"name": "linear", "factor": 2}))),
    (["model=gpt_nano", "model.mixer.qk_norm=true"], "mixer", MIXER.parse({"qk_norm": True})),
])
def test_the_command_line_names_an_entry_then_sets_its_keys(overrides, part, want) -> None:
    """Hydra alone merges a named mapping into the preset's (and refuses the new entry's keys); the command
    line train.py reads replaces the part, so every key of the new entry can be set after it."""
    from hydra import compose, initialize_config_dir

    from zoo.hydra_schema import part_overrides
    from zoo.presets import config_root
    from zoo.training.hydra_configs import register_train_configs

    register_train_configs()
    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        model = compose("config", overrides=part_overrides(overrides)).model
    assert getattr(ModelConfig.from_dict(model), part) == want


@pytest.mark.parametrize(("overrides", "message"), [
    (["model=bert_small", "model.head={name:classifier,num_labels:2,bias:true}"],
     r"model.head=classifier has no key 'bias'"),
    (["model=gpt_nano", "model.positional={name:rope,offset:2}"],
     r"model.positional=rope has no key 'offset'"),
    (["model=gpt_nano", "model.head=classifer"], r"Unknown head 'classifer'"),
])
def test_a_named_entry_with_a_bad_key_is_refused_naming_that_key(overrides, message) -> None:
    """The entry's own key is named, not a key of the preset's entry the bad mapping was merged into (was:
    model.head={name:classifier,bias:true} on bert_small said classifier has no key 'transform')."""
    from hydra import compose, initialize_config_dir

    from zoo.hydra_schema import part_overrides
    from zoo.presets import config_root
    from zoo.training.hydra_configs import register_train_configs

    register_train_configs()
    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        model = compose("config", overrides=part_overrides(overrides)).model
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict(model)
