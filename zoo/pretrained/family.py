"""A pretrained family converts one Hugging Face `model_type` both ways, config.json <-> ModelConfig and state
dict <-> zoo state dict, from tables: its config keys (`keys`, config_map.py), its base model's tensor map
(`tensors`, tensor_map.py) and one head layout per zoo head (`heads`, heads.py), the class `architectures`
names. A subclass that sets `model_type` is registered in FAMILIES under it; what the tables cannot say goes
in the hooks `more_from_hf` / `more_to_hf` / `read_first`. Export refuses a model its config.json cannot
express through the round trip (roundtrip.py), not through per-family lists."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from zoo.config import PARTS, ModelConfig, nest_paths
from zoo.modules.heads import NO_POOLER
from zoo.modules.mixer_settings import MIXER
from zoo.pretrained.config_map import Key, read, require, write
from zoo.pretrained.families import FAMILIES
from zoo.pretrained.heads import CLASS_HEADS, HeadLayout, PretrainedState, label_maps, label_names
from zoo.pretrained.tensor_map import HFTensors, Rows, load, save, zoo_shapes

Checks = dict[str, tuple[Any, Any]]  # {setting: (value, supported)}, as `require` takes them

__all__ = ["FAMILIES", "Checks", "Family", "HFTensors"]


class Family:
    """A family's tables; subclasses set them (and `model_type`, which registers the class)."""

    model_type: str = ""
    prefixes: tuple[str, ...] = ()  # base-model prefix of the task model (absent in bare-model checkpoints)
    same_model: frozenset[str] = frozenset()  # config keys written in an equivalent form (see roundtrip.py)
    keys: tuple[Key, ...] = ()  # config.json key <-> ModelConfig key (a dotted path: "mixer.qkv_bias")
    defaults: Mapping[str, Any] = {}  # config.json defaults of this family where they differ from the keys'
    # ModelConfig keys every checkpoint of the family has, as dotted paths (zoo.config.nest_paths nests them):
    # {"positional": "rope", "positional.layout": "half"}
    fixed: Mapping[str, Any] = {}
    requires: Mapping[str, Any] = {}  # config.json keys zoo reproduces at one value (null, absent: that one)
    tensors: Rows = {}  # the base model's tensor map (heads: zoo.pretrained.heads)
    class_prefix: str = ""  # "Bert": BertModel, BertForMaskedLM, ...
    lm_suffixes: tuple[str, ...] = ("ForCausalLM",)  # CLASS_HEADS suffixes of the family's LM; first exported
    heads: Mapping[str, HeadLayout] = {}  # zoo head -> where the family's class keeps it
    not_loaded: Mapping[str, str] = {}  # transformers classes of the family zoo does not load -> why

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model_type" in cls.__dict__:
            FAMILIES.register(cls.model_type, cls)

    # ----- config.json <-> ModelConfig -----
    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        """The zoo config of config.json `hf`; raises naming every setting zoo cannot reproduce."""
        settings, checks = read(self.keys, hf, self.defaults)
        checks.update({k: (ok if hf.get(k) is None else hf[k], ok) for k, ok in self.requires.items()})
        more, more_checks = self.more_from_hf(hf, settings)
        require(hf, self.model_type, {**checks, **more_checks})
        return ModelConfig.from_dict(nest_paths({**self.fixed, **settings, **more, **self.head_config(hf)}))

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """config.json content for `cfg` (what it cannot express, the round trip names)."""
        cfg = self.own_parts(cfg)
        return {"model_type": self.model_type, **self.head_to_hf(cfg), **self.requires,
                **write(self.keys, cfg), **self.more_to_hf(cfg)}

    def own_parts(self, cfg: ModelConfig) -> ModelConfig:
        """`cfg` with a part of another entry than the family's (`positional: t5_relative` for a rotary
        family, `mixer: mla` for one that fixes no mixer) replaced by the family's entry at its defaults, so
        the tables find the keys they write; the round trip then names the part as lost."""
        fixed = {"mixer": MIXER.default, **nest_paths(self.fixed)}  # no mixer fixed: attention
        own = {key: table.parse(fixed[key]) for key, table in PARTS.items() if key in fixed}
        changes = {key: part for key, part in own.items() if part.name != getattr(cfg, key).name}
        return dataclasses.replace(cfg, **changes) if changes else cfg

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        """ModelConfig keys the key table cannot read (from config.json `hf` and the keys read so far), and
        the checks of settings zoo cannot reproduce."""
        return {}, {}

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """config.json keys the key table cannot write."""
        return {}

    def read_back(self, hf: dict[str, Any], cfg: ModelConfig) -> ModelConfig:
        """The config an export's config.json `hf` of model `cfg` loads as (the export guard compares them).
        config.json cannot say whether a bare model has a pooler (its weights do): read back as `cfg` has."""
        try:
            back = self.config_from_hf(hf)
        except ValueError as err:
            raise ValueError(f"This zoo model cannot be exported as {self.model_type!r}: the config.json it "
                             f"would write does not load: {err}") from None
        has_pooler = getattr(cfg.head, "pooler", None) not in (None, NO_POOLER)
        return self.heads[back.head.name].fitted(back, has_pooler=has_pooler)

    # ----- heads: one HeadLayout per zoo head, the class named by `architectures` -----
    def classes(self) -> dict[str, str]:
        """Each transformers class the family loads -> its zoo head; the first per head is exported."""
        suffixes = [*self.lm_suffixes, *(s for s, h in CLASS_HEADS.items() if h != "lm")]
        return {self.class_prefix + s: CLASS_HEADS[s] for s in suffixes if CLASS_HEADS[s] in self.heads}

    def class_for(self, head: str) -> str:
        """The transformers class an export of `head` is written as."""
        found = [name for name, h in self.classes().items() if h == head]
        if not found:
            raise ValueError(f"This zoo model cannot be exported as {self.model_type!r}: model.head={head!r} "
                             f"has no {self.model_type} class; heads it has: {', '.join(self.heads)}.")
        return found[0]

    def layout(self, hf: Mapping[str, Any]) -> HeadLayout:
        """The head config.json's `architectures` names; one error naming an unknown class, listing these."""
        named = hf.get("architectures") or [self.class_for("lm")]
        classes = self.classes()
        unknown = [a for a in named if a not in classes]
        heads = {classes[a] for a in named if a in classes}
        if unknown or len(heads) != 1:
            why = "".join(f" {name}: {self.not_loaded[name]}." for name in unknown if name in self.not_loaded)
            raise ValueError(f"{self.model_type} config.json names architectures={list(named)}: zoo loads "
                             f"one {self.model_type} class of: {', '.join(classes)}.{why}")
        return self.heads[heads.pop()]

    def head_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        """The head's model config keys read from config.json."""
        return self.layout(hf).config(hf, self)

    def lm_keys(self, hf: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, Any]:
        """`keys` ("head.softcap", ...) when config.json's class is the LM, else {}: only the LM head reads
        them (a bare model or a classifier of the family has no such key)."""
        return dict(keys) if self.layout(hf).head == "lm" else {}

    def head_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """config.json keys that say the head: `architectures`, and a classifier's label maps (LABEL_i here;
        save_pretrained writes the real names)."""
        return {"architectures": [self.class_for(cfg.head.name)], **self.label_config(cfg, None)}

    def label_names(self, hf: dict[str, Any], cfg: ModelConfig) -> list[str] | None:
        """The class names of a classifier head from config.json (None: no named classes)."""
        names = label_names(hf) if self.heads[cfg.head.name].labelled else None
        return names if names is not None and len(names) == cfg.head.num_labels else None

    def label_config(self, cfg: ModelConfig, names: Sequence[str] | None) -> dict[str, Any]:
        """config.json keys naming a classifier's classes ({} for heads without named classes)."""
        layout = self.heads.get(cfg.head.name)
        if layout is None or not layout.labelled:
            return {}
        where = f"export of model.head={cfg.head.name} as {self.class_for(cfg.head.name)}"
        return label_maps(names, cfg.head.num_labels, where)

    def head_origins(self, head: str) -> dict[str, str]:
        """zoo head tensor -> the checkpoint tensor of this family's `head` class it is read from ({}:
        unknown, so init_from reuses a head tensor only for the same head)."""
        return self.heads[head].origins() if head in self.heads else {}

    # ----- tensors -----
    def tensor_map(self, cfg: ModelConfig) -> Rows:
        """The base model's rows for `cfg` (`tensors`, unless they depend on the config)."""
        return self.tensors

    def extra_tensors(self, names: Iterable[str]) -> dict[str, str]:
        """Stored tensors of `names` the model does not read, each with why (DeepSeek's multi-token-prediction
        layers): left out of the layer count and passed over on load with a warning."""
        return {}

    def fit_stored(self, cfg: ModelConfig, names: Iterable[str], given: Iterable[str] = ()) -> ModelConfig:
        """`cfg` as the names of the stored tensors say where config.json does not (DeepSeek's
        multi-token-prediction layers: transformers writes num_nextn_predict_layers 1 with or without
        them), but for the keys the caller sets (`given`, laid over after)."""
        return cfg

    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """zoo tensors read by hand before the map reads the rest (token tables kept in several copies)."""
        return {}

    def fitted(self, cfg: ModelConfig, src: HFTensors) -> ModelConfig:
        """`cfg` for the tensors in `src` (a bare model keeps a pooler only where its file has one)."""
        layout = self.heads[cfg.head.name]
        return layout.fitted(cfg, layout.has_pooler(src))

    def state_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """Base model, then the head. With `src.head_optional` (init_from), head tensors the file lacks are
        left out (they are made fresh) instead of failing."""
        layout, shapes = self.heads[cfg.head.name], zoo_shapes(cfg)
        out = self.read_first(src, cfg)
        out.update(load(self.tensor_map(cfg), src, {k: s for k, s in shapes.items() if k not in out}, cfg))
        before = len(src.missing)
        layout.from_hf(src, cfg, out, shapes)  # joins the base's tensors (a tied head reads the table)
        origins = {k: v for k, v in layout.origins().items() if k in out}
        if src.head_optional and len(src.missing) > before:
            src.new_head = src.missing[before:]
            del src.missing[before:]
            for key in [k for k, name in origins.items() if src.key(name) in src.new_head]:
                del out[key], origins[key]
        src.finish({**layout.unused, **self.extra_tensors(src.tensors)})
        return PretrainedState(out, origins)

    def state_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """The class's names: a bare model (head none) stores its base without the prefix, as transformers."""
        prefix, layout = self.base_prefix(cfg), self.heads[cfg.head.name]
        return {**save(self.tensor_map(cfg), state, cfg, prefix), **layout.to_hf(state, cfg, prefix)}

    def base_prefix(self, cfg: ModelConfig) -> str:
        """What the base model's tensor names start with in the class `cfg.head` exports ("" when bare)."""
        layout = self.heads[cfg.head.name]
        return "" if layout.bare else self.prefixes[0] if layout.prefix is None else layout.prefix
