"""Every Hugging Face export family x option the exporter accepts loads in transformers (AutoConfig, then the
class config.json's `architectures` names, from the folder) with the logits of the zoo model; every option it
refuses is refused naming the model_type and the key before anything is written. Was: a Qwen2-MoE export of
a model with qkv_bias left at its default wrote `"qkv_bias": null`, which transformers 5 refuses to load.

The walk: per family a tiny base config (a tiny transformers config of the family read by zoo), then one
option changed at a time: every value of each config key the family's table maps (its choices, or
true / false / null for a switch), each head the family has, each RoPE scaling and each MoE router and
switch and MoE layer pattern. An option zoo itself does not build is not a model, so not an export (counted,
never all of them)."""

from __future__ import annotations

import dataclasses
import typing
from functools import cache
from typing import Any

import pytest
import torch
import transformers

import zoo
from tests.pretrained.helpers import perturbed, right_padded
from tests.pretrained.shipped import FAMILIES as SHIPPED
from zoo.config import ModelConfig, nest_paths
from zoo.modules.layer_pattern import LayerPattern
from zoo.modules.moe import ROUTERS
from zoo.pretrained.api import family_for

_MOE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=24, vocab_size=99, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, num_experts_per_tok=2)
_MLA = dict(_MOE, num_key_value_heads=4, q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=6)  # latent attention (DeepSeek, GLM-4.7-Flash, Youtu)
TINY = {family: (config_class, tiny) for family, (config_class, tiny, _) in SHIPPED.items()} | {
    "mixtral": ("MixtralConfig", dict(_MOE, num_local_experts=4)),
    "olmoe": ("OlmoeConfig", dict(_MOE, num_experts=4)),
    "qwen2_moe": ("Qwen2MoeConfig", dict(_MOE, num_experts=4, moe_intermediate_size=12,
                                         shared_expert_intermediate_size=12)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(_MOE, num_experts=4, moe_intermediate_size=12, head_dim=8)),
    "deepseek_v3": ("DeepseekV3Config", dict(_MLA, moe_intermediate_size=12, n_routed_experts=4, n_group=2,
                                             topk_group=1, first_k_dense_replace=1)),
    "deepseek_v2": ("DeepseekV2Config", dict(_MLA, moe_intermediate_size=12, n_routed_experts=4, n_group=2,
                                             topk_group=1, topk_method="group_limited_greedy")),
    "glm4_moe_lite": ("Glm4MoeLiteConfig", dict(_MLA, moe_intermediate_size=12, n_routed_experts=4, n_group=2,
                                                topk_group=1)),
    "youtu": ("YoutuConfig", dict(_MLA, num_key_value_heads=4)),
    "gpt_oss": ("GptOssConfig", dict(_MOE, num_local_experts=4, head_dim=8, sliding_window=4,
                                     rope_parameters=dict(rope_type="yarn", factor=4.0, beta_fast=32.0,
                                                          beta_slow=1.0, truncate=False, rope_theta=500.0,
                                                          original_max_position_embeddings=16))),
}
# transformers 5.25's Youtu zeroes its token table's pad row whenever it loads a folder (its _init_weights
# writes through .data, past the loaded-weight guard): the zoo model is given that row as it will load
PAD_ROW_ZEROED = {"youtu"}
# the keys a RoPE scaling reads, at tiny values (longrope's factors: one per rotated pair, set per config)
SCALINGS = {"none": {}, "linear": dict(factor=2.0),
            "llama3": dict(factor=2.0, original_max_len=16),
            "yarn": dict(factor=2.0, original_max_len=16),
            "longrope": dict(original_max_len=16)}
MOE_OPTIONS = {"router": list(ROUTERS), "router_bias": [True, False], "shared_gate": [True, False],
               "n_shared_experts": [0, 1]}
# which layers are MoE: every one, every 2nd (old moe.every=2), all but the first (old moe.first_dense=1); the
# FFN tags only, laid over the base's other tags (gpt-oss keeps its local / global layers)
MOE_PATTERNS = [[], ["dense", "moe"], {"prefix": ["dense"], "cycle": ["moe"]}]
FFN_TAGS = {"dense", "moe"}


@cache
def base(family: str) -> ModelConfig:
    """The zoo config of a tiny transformers config of `family`."""
    config_class, tiny = TINY[family]
    hf = getattr(transformers, config_class)(**tiny).to_dict()
    return family_for(family).config_from_hf(hf)


def _hint(cfg: ModelConfig, key: str) -> Any:
    """The type of config key `key`: a ModelConfig field, or `part.key` of the part's settings."""
    owner, _, name = key.rpartition(".")
    hints = typing.get_type_hints(type(getattr(cfg, owner)) if owner else ModelConfig)
    return hints.get(name)


def _switch(hint: Any) -> list[Any] | None:
    """A bool key's values (null too where the key may be null); None for other keys."""
    args = set(typing.get_args(hint)) or {hint}
    return [True, False, *([None] if type(None) in args else [])] if bool in args else None


def options(family: str) -> list[tuple[str, Any]]:
    """(key, value) options of `family`: its table's keys, heads, RoPE scalings and MoE keys, one at a
    time."""
    fam, cfg = family_for(family), base(family)
    out: list[tuple[str, Any]] = []
    for key in fam.keys:
        if key.choices is not None:
            out += [(key.zoo, v) for v in dict.fromkeys(key.choices.values()) if v is not None]
        elif values := _switch(_hint(cfg, key.zoo)):
            out += [(key.zoo, v) for v in values]
    out += [("head", head) for head in fam.heads]
    if cfg.positional.name == "rope":
        out += [("positional.scaling", name) for name in SCALINGS]
    if cfg.ffn.name == "moe":
        out += [(f"ffn.{k}", v) for k, values in MOE_OPTIONS.items() for v in values]
        out += [("layer_pattern", pattern) for pattern in MOE_PATTERNS]
    return list({repr(option): option for option in out}.values())  # a pattern is a list: not hashable


CASES = [(family, key, value) for family in sorted(TINY) for key, value in options(family)]


def with_family_head(family: str, head: str) -> ModelConfig:
    """The tiny base of `family` with its `head` as the family builds it (a class of that head with 3 labels
    loads with these head keys; a head named alone would take the head's defaults)."""
    fam = family_for(family)
    keys = fam.heads[head].config({"num_labels": 3}, fam)
    part = nest_paths({k: v for k, v in keys.items() if k == "head" or k.startswith("head.")})["head"]
    return dataclasses.replace(base(family), head=part)


def _changed(cfg: ModelConfig, key: str, value: Any) -> ModelConfig:
    extra: dict[str, Any] = {}
    if key == "positional.scaling":
        value = {"name": value, **SCALINGS[value]}
        if value["name"] == "longrope":
            pairs = int(cfg.head_size * cfg.positional.fraction) // 2
            value.update(short_factor=[1.0] * pairs, long_factor=[2.0] * pairs)
    if key == "layer_pattern":
        ffn = LayerPattern.parse(value)
        value = LayerPattern.from_layers(["+".join(sorted(cfg.layer_pattern.tags(i) - FFN_TAGS | ffn.tags(i)))
                                          for i in range(cfg.n_layers)])
    if "." in key:  # a key of a part: the part's settings with it changed (parsed and checked again)
        part, name = key.split(".", 1)
        return dataclasses.replace(cfg, **{part: {**getattr(cfg, part).to_data(), name: value}}, **extra)
    return dataclasses.replace(cfg, **{key: value, **extra})


def model_for(cfg: ModelConfig) -> torch.nn.Module | None:
    """A zoo model of `cfg`, every weight perturbed (routers far from ties); None if zoo does not build it."""
    torch.manual_seed(0)
    try:
        model = zoo.build(cfg)
    except ValueError:
        return None
    model = perturbed(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("router.proj.weight"):
                p.normal_(0, 1.0)
    return model.eval()


def inputs(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A right-padded batch (ids from 3, pads pad_id: a decoder's classifier reads the last non-pad token),
    and decoder ids for an encoder-decoder."""
    ids, mask = right_padded(2, 10, cfg.vocab_size, [10, 6])
    ids = ids.masked_fill(mask == 0, cfg.pad_id)
    batch = {"input_ids": ids, "attention_mask": mask}
    if cfg.arch == "encoder_decoder":
        batch["decoder_input_ids"] = right_padded(2, 5, cfg.vocab_size, [5, 5], seed=1)[0]
    return batch


OUTPUTS = {"none": ("last_hidden_state",), "qa": ("start_logits", "end_logits")}  # else: logits


def assert_same_outputs(model, hf, cfg: ModelConfig) -> None:
    batch = inputs(cfg)
    with torch.no_grad():
        theirs = hf(**batch)
        mine = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                     **({"decoder_input_ids": batch["decoder_input_ids"]} if "decoder_input_ids" in batch
                        else {}))
    per_token = cfg.arch != "encoder_decoder"
    real = batch["attention_mask"].bool()  # pads' outputs are a convention (not compared)
    for name in OUTPUTS.get(cfg.head.name, ("logits",)):
        a, b = getattr(mine, name), getattr(theirs, name)
        if per_token and a.dim() >= 2 and a.shape[:2] == real.shape:
            a, b = a[real], b[real]
        assert a.shape == b.shape and (a - b).abs().max() < 1e-4, (name, (a - b).abs().max())


def check(family: str, key: str, value: Any, tmp_path) -> bool:
    """Export the option to `family`: refused naming it with nothing written, or loaded with equal outputs.
    False when zoo does not build the option."""
    cfg = with_family_head(family, value) if key == "head" else _changed(base(family), key, value)
    model = model_for(cfg)
    if model is None:
        return False
    if family in PAD_ROW_ZEROED:
        with torch.no_grad():
            model.embed.tokens.weight[cfg.pad_id] = 0
    out = tmp_path / "hf"
    try:
        zoo.save_pretrained(model, out, model_type=family)
    except ValueError as err:
        assert not out.exists(), "a refused export wrote its folder"
        message = str(err)  # the key, or what it changes (norm_placement=post: final_norm)
        assert f"cannot be exported as {family!r}" in message and "model." in message, message
        return True
    config = transformers.AutoConfig.from_pretrained(out)  # refuses a value its fields do not take
    assert config.model_type == family
    hf = getattr(transformers, config.architectures[0]).from_pretrained(out).eval()
    assert_same_outputs(model, hf, cfg)
    return True


def _id(case) -> str:
    family, key, value = case
    return f"{family}-{key}={value}"


# the reported routers and qkv_bias' null, Qwen2-MoE's QA class (base under model.), BART's untied head
# (wrote no embed_tokens), one refusal; mla's bias left null (wrote attention_bias: null), a tied Youtu
FAST_CASES = [("qwen2_moe", "ffn.router", "softmax_topk"), ("qwen3_moe", "ffn.router", "softmax_topk_norm"),
              ("qwen2_moe", "mixer.qkv_bias", None), ("qwen2_moe", "head", "qa"),
              ("bart", "tie_embeddings", False), ("roberta", "activation", "relu"),
              ("deepseek_v3", "mixer.bias", None), ("youtu", "tie_embeddings", True)]


@pytest.mark.parametrize("case", FAST_CASES, ids=_id)
def test_a_representative_export_loads_or_is_refused_by_name(tmp_path, case):
    assert check(*case, tmp_path)


@pytest.mark.e2e
def test_every_family_x_option_loads_or_is_refused_by_name(tmp_path):
    built = [case for i, case in enumerate(CASES) if check(*case, tmp_path / str(i))]
    for family in TINY:
        assert any(c[0] == family for c in built), f"no option of {family} builds"


def test_qwen2_moe_writes_qkv_bias_as_a_bool():
    """The reported case: a Qwen2-MoE export of a model whose qkv_bias is left at its default (the bias)."""
    cfg = _changed(base("qwen2_moe"), "mixer.qkv_bias", None)
    written = zoo.pretrained.api.hf_config(family_for("qwen2_moe"), cfg)
    assert written["qkv_bias"] is cfg.use_qkv_bias


def test_a_refused_activation_is_named_not_shown_as_a_function():
    model = model_for(_changed(base("roberta"), "activation", "relu"))
    with pytest.raises(ValueError, match=r"model.head.activation='relu' \(would load as 'gelu'\)"):
        zoo.pretrained.api.hf_config(family_for("roberta"), model.config)
