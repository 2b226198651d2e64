"""The flat model keys of the layout before each part owned its keys (issue 35), where each went, and the
upgrade of a config saved in that layout (checkpoints, zoo exports, save_pretrained folders written by an
older zoo load unchanged). A user's YAML or command line with an old key gets an error naming the new place
(ModelConfig.from_dict): one spelling per knob, not two."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from zoo.modules.head_settings import HEAD
from zoo.modules.positional_settings import POSITIONAL, ROPE_SCALING

_ROPE = {"rope_base": "base", "rope_local_base": "local_base", "rope_layout": "layout",
         "rope_fraction": "fraction"}
_SCALING = {"rope_factor": "factor", "rope_low_freq_factor": "low_freq_factor",
            "rope_high_freq_factor": "high_freq_factor", "rope_truncate": "truncate",
            "rope_original_max_len": "original_max_len", "rope_short_factor": "short_factor",
            "rope_long_factor": "long_factor"}
_SCHEME_KEYS = {"learned": {"pos_offset": "offset", "pos_skip_pads": "skip_pads"},
                "sinusoidal": {"sinusoidal_layout": "layout"},
                "t5_relative": {"rel_buckets": "buckets", "rel_max_distance": "max_distance"}, "rope": _ROPE}
_MIXER = {"qkv_bias": "qkv_bias", "qk_norm": "qk_norm", "qk_norm_scope": "qk_norm_scope",
          "attn_scale": "scale", "attn_softcap": "softcap", "attn_sinks": "sinks",
          "sliding_window": "sliding_window"}
_PATTERN = ("global_every", "global_first", "nope_every")
_HEAD = {"num_labels": "num_labels", "head_pool": "pool", "head_pooler": "pooler", "head_dense": "dense",
         "head_proj_bias": "proj_bias", "head_activation": "activation", "head_bias": "bias",
         "head_transform": "transform", "head_scale": "scale", "final_softcap": "softcap"}
# keys of model.moe (before the FFN was a part): their new place
MOVED_MOE = {"every": "model.layer_pattern (e.g. [dense, moe] for every 2nd layer MoE)",
             "first_dense": "model.layer_pattern (e.g. {prefix: [dense], cycle: [moe]})",
             "router": "model.ffn.router (a name, or {name: sigmoid_bias, bias_rate: ...})",
             "bias_rate": "model.ffn.router.bias_rate (with model.ffn.router=sigmoid_bias)",
             "balance": "model.ffn.balance (a mapping of loss name to coefficient: {aux: 0.01, z: 0.001})",
             "aux_coef": "model.ffn.balance.aux", "z_coef": "model.ffn.balance.z",
             **{k: f"model.ffn.{k}" for k in ("n_experts", "top_k", "n_shared_experts", "shared_gate",
                                               "expert_d_ff", "router_bias", "route_scale",
                                               "capacity_factor")}}
_MOE_OLD_DEFAULTS = {"router": "topk_softmax", "balance": "aux", "aux_coef": 0.01, "z_coef": 0.001,
                     "bias_rate": 0.001}

MOVED: dict[str, str] = {
    **{k: f"model.positional.{v}" for keys in _SCHEME_KEYS.values() for k, v in keys.items()},
    "rope_scaling": "model.positional.scaling (a name, or {name: ..., factor: ...})",
    **{k: f"model.positional.scaling.{v}" for k, v in _SCALING.items()},
    **{k: f"model.mixer.{v}" for k, v in _MIXER.items()},
    **{k: f"model.head.{v}" for k, v in _HEAD.items()},
    "global_every": "model.layer_pattern (e.g. [local, global] for every 2nd layer global)",
    "global_first": "model.layer_pattern (e.g. [global, local, local] for layers 0, 3, ... global)",
    "nope_every": "model.layer_pattern (e.g. [rope, rope, rope, nope] for every 4th layer without RoPE)",
    "moe": "model.ffn: {name: moe, n_experts: ..., top_k: ..., router: ..., balance: {aux: 0.01}} (the MoE "
           "keys moved into the FFN part)",
}


def _old_layer(data: Mapping[str, Any], moe: Mapping[str, Any], index: int) -> str:
    """Layer `index`'s tags under the old rules (global_every/global_first, nope_every, moe every/first)."""
    tags = []
    every = data.get("global_every") or 0
    if data.get("sliding_window") is not None and every:
        is_global = index % every == (0 if data.get("global_first") else every - 1)
        tags.append("global" if is_global else "local")
    nope = data.get("nope_every") or 0
    if nope:
        tags.append("nope" if (index + 1) % nope == 0 else "rope")
    if data.get("ffn") == "moe" and (moe.get("every", 1) != 1 or moe.get("first_dense", 0)):
        is_moe = index >= moe.get("first_dense", 0) and (index + 1) % moe.get("every", 1) == 0
        tags.append("moe" if is_moe else "dense")
    return "+".join(tags)


def _pattern(data: Mapping[str, Any], moe: Mapping[str, Any]) -> Any:
    """The layer pattern giving the old per-layer rules: the dense prefix, then one period of the rest."""
    first = moe.get("first_dense", 0) if data.get("ffn") == "moe" else 0
    period = math.lcm(data.get("global_every") or 1, data.get("nope_every") or 1,
                      moe.get("every", 1) if data.get("ffn") == "moe" else 1)
    prefix = [_old_layer(data, moe, i) for i in range(first)]
    cycle = [_old_layer(data, moe, first + j) for j in range(period)]
    shortest = next(p for p in range(1, period + 1) if all(cycle[j] == cycle[j % p] for j in range(period)))
    cycle = cycle[:shortest]
    if not any(prefix + cycle):
        return []
    return {"prefix": prefix, "cycle": cycle} if prefix else cycle


def _head(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The head part of a flat config: the keys the chosen head reads (the old code ignored the others)."""
    reads = HEAD.keys(name) if name in HEAD else []
    return {"name": name, **{new: data[old] for old, new in _HEAD.items() if old in data and new in reads}}


def _ffn(data: Mapping[str, Any], moe: Mapping[str, Any]) -> Any:
    """The FFN part of a config saved with `ffn: <name>` and MoE's keys under `moe`."""
    name = data.get("ffn", "mlp")
    if name != "moe":
        return name
    old = {**_MOE_OLD_DEFAULTS, **moe}
    router: dict[str, Any] = {"name": old["router"]}
    if old["router"] == "sigmoid_bias":
        router["bias_rate"] = old["bias_rate"]
    balances = [old["balance"]] if isinstance(old["balance"], str) else list(old["balance"])
    coefs = {"aux": old["aux_coef"], "z": old["z_coef"]}
    kept = {k: v for k, v in moe.items() if k not in _MOE_OLD_DEFAULTS and k not in ("every", "first_dense")}
    return {"name": "moe", **kept, "router": router,
            "balance": {b: coefs[b] for b in balances if b != "none"}}


def upgrade_saved(data: Mapping[str, Any]) -> dict[str, Any]:
    """A saved model config in either layout -> the current one. Old flat keys the chosen scheme did not read
    are dropped (the old code ignored them too)."""
    data = dict(data)
    moe = dict(data.get("moe") or {})
    if not set(data) & set(MOVED) and not set(moe) & set(MOVED_MOE):
        return data
    if isinstance(data.get("positional", "learned"), str):
        scheme = data.get("positional", "learned")
        part: dict[str, Any] = {"name": scheme}
        for old, new in _SCHEME_KEYS.get(scheme, {}).items():
            if old in data:
                part[new] = data[old]
        if scheme in POSITIONAL and "scaling" in POSITIONAL.keys(scheme):  # rope: its scaling
            scaling = {"name": data.get("rope_scaling", "none")}
            reads = ROPE_SCALING.docs()[scaling["name"]] if scaling["name"] in ROPE_SCALING else {}
            scaling.update({new: data[old] for old, new in _SCALING.items() if old in data and new in reads})
            part["scaling"] = scaling
        data["positional"] = part
    if not isinstance(data.get("mixer"), Mapping):
        data["mixer"] = {"name": "attention",
                         **{new: data[old] for old, new in _MIXER.items() if old in data}}
    if isinstance(data.get("head", "lm"), str):
        data["head"] = _head(data.get("head", "lm"), data)
    if "layer_pattern" not in data:
        data["layer_pattern"] = _pattern(data, moe)
    if not isinstance(data.get("ffn", "mlp"), Mapping):
        data["ffn"] = _ffn(data, moe)
    return {k: v for k, v in data.items() if k not in MOVED}


def moved_override(overrides: list[str]) -> str | None:
    """The error for the first `model.<old key>=...` command-line override (Hydra's own would only say the
    key is unknown), or None."""
    for item in overrides:
        key = item.lstrip("+~").split("=", 1)[0]
        if not key.startswith("model."):
            continue
        path = key.removeprefix("model.")
        inner = path.removeprefix("moe.")
        where = MOVED.get(path) or (MOVED_MOE.get(inner) if path.startswith("moe.") else None)
        if where is not None:
            return (f"{key} is now {where} (each part owns its keys since issue 35; docs/design.md, "
                    "\"Config parts\").")
    return None
