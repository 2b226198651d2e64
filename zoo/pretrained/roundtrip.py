"""The guard every Hugging Face export passes: the config.json a family writes must read back as the same
model. A knob the family cannot express (a new one it does not know of, say) is then one clear error
instead of a folder that `transformers` and zoo load as a different model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.feedforward import ACTIVATIONS, plain_activation
from zoo.modules.head_settings import HEAD
from zoo.modules.residual import uses_final_norm

# Keys that do not change what the saved weights compute (training-only settings).
NOT_IN_THE_MODEL = frozenset({"init_std", "dropout", "attn_dropout"})
# A mixer's keys that say how it splits its work, not what it computes (gated_deltanet's chunk size: the
# chunked and recurrent forms give the same outputs)
MIXER_WORK_ONLY = frozenset({"chunk_size"})


def effective(cfg: ModelConfig) -> dict[str, Any]:
    """The config with every default resolved (d_ff=None and d_ff=ffn_ratio*d_model build the same model);
    parts as dotted paths ("positional.scaling.factor", "head.pool"), the layer pattern as what each layer
    is."""
    data = cfg.to_dict()
    data["mixer"]["qkv_bias"] = cfg.use_qkv_bias
    if data["mixer"].get("latent_norm_eps", 0) is None:  # mla's latent norms: null is model.norm_eps
        data["mixer"]["latent_norm_eps"] = cfg.norm_eps
    if "sliding_window" in data["mixer"] and not any(map(cfg.layer_is_local, range(_depth(cfg)))):
        data["mixer"]["sliding_window"] = None  # a window no layer uses
    if not getattr(cfg.mixer, "qk_norm", False):
        data["mixer"].pop("qk_norm_scope", None)  # no qk norm: no scope
    data["ffn"] = ffn_in_the_model(cfg)
    for key in ("mixer", "linear_mixer"):
        if isinstance(data.get(key), dict):
            data[key] = {k: v for k, v in data[key].items() if k not in MIXER_WORK_ONLY}
    out: dict[str, Any] = {}
    for key, value in data.items():  # in the order of the fields, parts in their place
        parted = key in ("positional", "mixer", "ffn", "head", "mtp")
        out.update(_paths(key, value) if parted else {key: value})
    out.update(d_ff=cfg.ffn_dim, n_kv_heads=cfg.kv_heads, head_dim=cfg.head_size,
               decoder_start_id=cfg.start_id, final_norm=uses_final_norm(cfg),
               encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
               layer_pattern=Layers.of(cfg))
    out.update(head_settings(cfg))
    # n_layers: in the resolved encoder/decoder_layers
    for key in ("ffn_ratio", "n_layers", *NOT_IN_THE_MODEL):
        out.pop(key)
    out.pop("mtp.weight", None)  # multi-token prediction's loss weight acts in training only
    # only a seq2seq decoder starts from it (a BERT tokenizer's is its [PAD])
    if cfg.arch != "encoder_decoder":
        out.pop("decoder_start_id")
    return out


def _depth(cfg: ModelConfig) -> int:
    return max(cfg.n_encoder_layers, cfg.n_decoder_layers)


def _paths(path: str, part: Any) -> dict[str, Any]:
    """A part's data as dotted paths: {"positional": "rope", "positional.base": 1e4, ...}."""
    if not isinstance(part, Mapping):
        return {path: part}
    out = {path: part["name"]}
    for key, value in part.items():
        if key != "name":
            out.update(_paths(f"{path}.{key}", value))
    return out


@dataclass(frozen=True)
class Layers:
    """The layer pattern compared by what it makes each layer (local, rotary, MoE), so two spellings of one
    stack are equal (a cycle tiled to the depth, a pattern beyond the last layer), and shown as written."""

    each: tuple[tuple[bool, bool, bool], ...]
    written: Any = field(compare=False)

    @classmethod
    def of(cls, cfg: ModelConfig) -> Layers:
        each = tuple((cfg.layer_is_local(i), cfg.layer_rotates(i), cfg.layer_is_moe(i))
                     for i in range(_depth(cfg)))
        return cls(each, cfg.layer_pattern.to_data())

    def __repr__(self) -> str:
        return repr(self.written)


@dataclass(frozen=True)
class Computed:
    """An activation compared by the function it computes (two names of one function are equal) and shown by
    its name in the round trip's error."""

    fn: Callable[..., Any]
    name: str = field(compare=False)

    def __repr__(self) -> str:
        return repr(self.name)


def _head_activation(cfg: ModelConfig) -> Computed | None:
    """The head transform's activation (None without a transform)."""
    if not (getattr(cfg.head, "transform", False) or getattr(cfg.head, "dense", False)):
        return None
    name = cfg.head.activation or cfg.activation
    act = ACTIVATIONS.get(name)
    return Computed(plain_activation(name).fn, act.plain if act.gated else name)


def ffn_in_the_model(cfg: ModelConfig) -> dict[str, Any]:
    """The FFN's keys that change what the weights compute, defaults resolved (MoE's balancing losses, its
    capacity and the router's bias step act in training only); the router's whole settings (its dtype,
    groups, renormalisation), which a family's config.json says by its keys or by its model_type."""
    settings = cfg.ffn.to_data()
    if cfg.ffn.name != "moe":
        return settings
    settings["expert_d_ff"] = settings["expert_d_ff"] or cfg.ffn_dim
    settings["router"] = {k: v for k, v in settings["router"].items() if k not in ROUTER_TRAINING_ONLY}
    return {k: v for k, v in settings.items() if k not in MOE_TRAINING_ONLY}


MOE_TRAINING_ONLY = frozenset({"balance", "capacity_factor"})
ROUTER_TRAINING_ONLY = frozenset({"bias_rate"})  # sigmoid_bias's bias step: the bias itself is a weight


def head_settings(cfg: ModelConfig) -> dict[str, Any]:
    """The head's pooling, pooler, projection bias and transform activation as its module resolves them (null
    means a default that depends on the head and the stack), as dotted paths, for the keys the head reads."""
    from zoo.models import build_model

    with torch.device("meta"):
        head = build_model(cfg).head
    proj = getattr(head, "proj", None)
    resolved = {"pool": getattr(head, "pooling", None), "pooler": getattr(head, "pooler", None),
                "proj_bias": None if proj is None else proj.bias is not None,
                "activation": _head_activation(cfg)}
    reads = HEAD.keys(cfg.head.name)
    return {f"head.{k}": v for k, v in resolved.items() if k in reads}


def check_roundtrip(cfg: ModelConfig, read_back: ModelConfig, model_type: str,
                    same_model: frozenset[str] = frozenset(), holder: str = "its config.json") -> None:
    """Raise ValueError naming every key whose value the `model_type` config.json would not keep; `same_model`
    are keys the family writes in an equivalent form (e.g. no head bias saved as a zero bias); `holder`: what
    carries the config (a GGUF: llama.cpp's metadata)."""
    mine, theirs = effective(cfg), effective(read_back)
    lost = [f"model.{k}={mine[k]!r} (would load as {theirs[k]!r})" for k in mine
            if k in theirs and mine[k] != theirs[k] and k not in same_model]  # absent: another arch's key
    if lost:
        raise ValueError("This zoo model cannot be exported as "
                         f"{model_type!r}: {holder} cannot express "
                         + "; ".join(lost) + ".")
