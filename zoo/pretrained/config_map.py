"""A family's config.json as one table of `Key` rows (config.json key <-> ModelConfig key as a dotted path,
a default, a choice of values), read and written by `read` / `write`; the RoPE keys every rotary family shares
(`Rope`); transformers' per-layer lists as a layer pattern (`pattern_of`). A setting zoo cannot reproduce is
named with what is supported (`require`)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zoo.config import ModelConfig, value_at
from zoo.modules.layer_pattern import LayerPattern
from zoo.modules.positional_settings import ROPE_SCALING

REQUIRED = object()  # a Key without a default: config.json must hold it (io.HFConfig names the file and key)
# ModelConfig keys written as their resolved value (d_ff=None is written as the d_ff it builds)
RESOLVED = {"d_ff": "ffn_dim", "n_kv_heads": "kv_heads", "head_dim": "head_size",
            "mixer.qkv_bias": "use_qkv_bias", "mixer.bias": "use_qkv_bias",  # mla: its down projections
            "attn_dropout": "attention_dropout", "encoder_layers": "n_encoder_layers",
            "decoder_layers": "n_decoder_layers", "decoder_start_id": "start_id"}
# HF activation -> zoo activation (plain MLPs); export writes the first HF name of each
PLAIN = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
         "silu": "silu", "swish": "silu"}


@dataclass(frozen=True)
class Key:
    """config.json key `hf` <-> ModelConfig key `zoo` (a dotted path: "mixer.sliding_window"): read as
    `default` when absent, through `choices` (HF value -> zoo value) when given. `token`: a token id, kept
    only inside the vocabulary (its default may name a key read before, e.g. GPT-2's pad id defaults to its
    eos id)."""

    zoo: str
    hf: str
    default: Any = REQUIRED
    choices: Mapping[Any, Any] | None = None
    token: bool = False


def read(keys: tuple[Key, ...], hf: Mapping[str, Any], defaults: Mapping[str, Any]
         ) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
    """ModelConfig keys of config.json `hf` (`defaults`: the family's own defaults, by HF key), and the checks
    `require` makes of them."""
    out: dict[str, Any] = {}
    checks: dict[str, tuple[Any, Any]] = {}
    for key in keys:
        default = defaults.get(key.hf, key.default)
        if key.token:
            out[key.zoo] = special_id(hf, key.hf, out["vocab_size"], out.get(default, default))
            continue
        value = hf[key.hf] if default is REQUIRED else hf.get(key.hf, default)
        if key.choices is not None:
            checks[key.hf] = (value, tuple(key.choices))
            value = key.choices.get(value)
        out[key.zoo] = value
    if out.get("head_dim") is not None and out["head_dim"] * out["n_heads"] == out["d_model"]:
        out["head_dim"] = None  # the default, as zoo writes it
    return out, checks


def write(keys: tuple[Key, ...], cfg: ModelConfig) -> dict[str, Any]:
    """config.json keys for `cfg`. A zoo value no HF value stands for is written as the first choice, which
    reads back as another model: the round trip (roundtrip.py) names it with everything else lost."""
    out = {}
    for key in keys:
        value = value_at(cfg, RESOLVED.get(key.zoo, key.zoo))
        if key.choices is not None:
            spelled = {z: h for h, z in reversed(list(key.choices.items()))}  # the first HF value of each
            value = spelled.get(value, next(iter(key.choices)))
        out[key.hf] = value
    return out


def require(hf: Mapping[str, Any], model_type: str, checks: Mapping[str, tuple[Any, Any]]) -> None:
    """Raise if any config.json setting holds a value zoo cannot reproduce: {setting: (value, supported)},
    where a tuple of supported values means any of them."""
    bad = [f"{k}={v!r} (supported: {', '.join(map(str, ok)) if isinstance(ok, tuple) else repr(ok)})"
           for k, (v, ok) in checks.items() if (v not in ok if isinstance(ok, tuple) else v != ok)]
    if bad:
        raise ValueError(f"{model_type} config.json uses settings zoo does not support: {', '.join(bad)}.")


def special_id(hf: Mapping[str, Any], key: str, vocab_size: int, default: int | None) -> int | None:
    """A token id from config.json; an id outside the vocabulary (e.g. GPT-2's 50256 in a tiny test
    config) cannot index anything, so it is replaced by `default` with a warning."""
    value = hf.get(key)
    if isinstance(value, list):  # generation configs may list several eos ids; zoo keeps the first
        value = value[0] if value else None
    if value is None:
        return default
    if not 0 <= int(value) < vocab_size:
        warnings.warn(f"config.json {key}={value} is outside the vocabulary [0, {vocab_size}); using "
                      f"{default}.", stacklevel=4)
        return default
    return int(value)


def pattern_of(layers: Sequence[str], default: str) -> list[str] | dict[str, list[str]]:
    """transformers' per-layer answers as `model.layer_pattern` data: one tag spec per layer ("moe",
    "dense", ...) -> the shortest {prefix, cycle} that gives exactly them; [] when every layer is `default`
    (the model's default layer, which the empty pattern means). A prefix is kept only where it shortens the
    pattern (Qwen MoE's dense first layers: {prefix: [dense], cycle: [moe]})."""
    layers = list(layers)
    if all(spec == default for spec in layers):
        return []
    best = LayerPattern.from_layers(layers)
    for start in range(1, len(layers)):
        cycle = LayerPattern.from_layers(layers[start:]).cycle
        if start + len(cycle) < len(best.prefix) + len(best.cycle):
            best = LayerPattern(tuple(layers[:start]), cycle)
    return best.to_data()


def with_tags(pattern: Any, tags: Sequence[str], default: str) -> list[str] | dict[str, list[str]]:
    """Layer pattern data `pattern` with one more dimension's tag per layer ("moe", "dense", ...), left out
    when every layer has `default` (Qwen MoE: the windows' pattern, then which layers are MoE)."""
    if all(tag == default for tag in tags):
        return LayerPattern.parse(pattern).to_data()
    held = LayerPattern.parse(pattern)
    return pattern_of(["+".join([*sorted(held.tags(i)), tag]) for i, tag in enumerate(tags)], "")


# ----- RoPE: transformers 5's `rope_parameters`, 4.x's `rope_theta` / `rope_scaling` -----
ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3", "yarn": "yarn"}  # HF -> zoo
PLAIN_ROPE = {"default": "none"}
_ROPE_KEYS = {"factor": "factor", "low_freq_factor": "low_freq_factor",  # HF rope_parameters -> zoo's
              "high_freq_factor": "high_freq_factor",                     # model.positional.scaling keys
              "original_max_position_embeddings": "original_max_len",
              "short_factor": "short_factor", "long_factor": "long_factor", "truncate": "truncate",
              "mscale": "mscale", "mscale_all_dim": "mscale_all_dim"}  # DeepSeek's YaRN
def moe_paths(keys: Mapping[str, Any]) -> dict[str, Any]:
    """A MoE family's FFN keys as dotted paths beside its fixed `ffn: moe`: {"ffn.n_experts": 8, ...}."""
    return {f"ffn.{key}": value for key, value in keys.items()}


SCALING = "positional.scaling"  # where the family tables (dotted paths, zoo.config.nest_paths) put them
# rope_parameters keys a scaling reads that may be absent: their default (None: not written back either)
_ROPE_OPTIONAL = {"truncate": True, "mscale": None, "mscale_all_dim": None}
_ROPE_DEFAULTS = {"beta_fast": 32, "beta_slow": 1, "truncate": True, "mscale": None, "mscale_all_dim": None,
                  "attention_factor": None, "partial_rotary_factor": 1.0}  # other keys: zoo reproduces these


@dataclass(frozen=True)
class Rope:
    """A family's RoPE: the HF rope types it computes, and, where it rotates part of each head, the 4.x
    top-level key of that share and its default (`partial`); `base`: 4.x's key of the base; `original`: a
    top-level key of the pretrained length and its default, which transformers lets override the rope
    parameters' own (Phi-3's `original_max_position_embeddings`, 4096)."""

    types: Mapping[str, str]
    partial: tuple[str, float] | None = None
    base: str = "rope_theta"
    original: tuple[str, int] | None = None

    def from_hf(self, hf: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
        """zoo's RoPE keys (model.positional's base, fraction and scaling with the keys it reads, as dotted
        paths), and the checks."""
        params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
        rope_type = params.pop("rope_type", params.pop("type", "default"))
        scaling = self.types.get(rope_type, "none")
        base = float(params.pop("rope_theta", hf.get(self.base, 10000.0)))
        out: dict[str, Any] = {"positional.base": base, f"{SCALING}.name": scaling}
        checks: dict[str, tuple[Any, Any]] = {"rope_type": (rope_type, tuple(self.types))}
        if self.partial:
            key, default = self.partial
            out["positional.fraction"] = float(params.pop("partial_rotary_factor", hf.get(key, default)))
        reads = ROPE_SCALING.docs()[scaling]
        for hf_key, key in _ROPE_KEYS.items():
            if key in reads:
                value = params.pop(hf_key, _ROPE_OPTIONAL.get(hf_key))
                if key == "original_max_len" and self.original:
                    value = hf.get(*self.original)
                if hf_key not in _ROPE_OPTIONAL:
                    checks[f"rope_parameters.{hf_key} given"] = (value is not None, True)
                out[f"{SCALING}.{key}"] = _rope_value(key, value)
        checks.update({f"rope_parameters.{k}": (v, _ROPE_DEFAULTS.get(k, "absent")) for k, v in
                       params.items()})
        return out, checks

    def to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """`rope_parameters` (and 4.x's keys) for zoo's RoPE keys; a scaling the family lacks is written as
        none (the round trip names it)."""
        rope, scaling = cfg.positional, cfg.positional.scaling
        rope_type = {v: k for k, v in self.types.items()}.get(scaling.name, "default")
        written = self.types.get(rope_type, "none")
        reads = ROPE_SCALING.docs()[written] if written == scaling.name else {}
        params = {"rope_type": rope_type, "rope_theta": rope.base,
                  **{h: _data(getattr(scaling, k)) for h, k in _ROPE_KEYS.items() if k in reads
                     and not (h in _ROPE_OPTIONAL and getattr(scaling, k) is None)}}
        legacy = {self.base: rope.base}
        if self.partial:
            params["partial_rotary_factor"] = legacy[self.partial[0]] = rope.fraction
        if self.original and "original_max_len" in reads:
            legacy[self.original[0]] = scaling.original_max_len
        return {"rope_parameters": params, **legacy}


def _rope_value(key: str, value: Any) -> Any:
    """A rope parameter as zoo keeps it: the original length an int, a switch a bool, per-pair factors a list
    of floats, other factors a float."""
    if value is None or isinstance(value, bool) or key == "original_max_len":
        return value
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else float(value)


def _data(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
