"""Heads as the folder says. `CLASS_HEADS` is the one table from a transformers class-name suffix to zoo's
`model.head`; a family lists, per zoo head, where that head keeps its tensors in the family's class (a
`HeadLayout`), and loading, export and `init_from`'s reuse of head tensors are all derived from those lists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.heads import HEADS, NO_POOLER
from zoo.pretrained.family import Family, HFTensors

# transformers class-name suffix -> zoo model.head (a family's class is its `class_prefix` + a suffix)
CLASS_HEADS: dict[str, str] = {
    "Model": "none",  # a bare base model: hidden states (and the pooler where the class has one)
    "ForMaskedLM": "lm",
    "ForPreTraining": "lm",  # BERT's MLM + next-sentence model: the NSP head is not used
    "ForCausalLM": "lm",
    "LMHeadModel": "lm",
    "ForConditionalGeneration": "lm",
    "MTModel": "lm",  # Marian's translation model
    "ForSequenceClassification": "classifier",
    "ForTokenClassification": "token_classifier",
    "ForQuestionAnswering": "qa",
}


def stored_name(name: str, prefix: str) -> str:
    """A layout name as stored by a class whose base model sits under `prefix` (`~`: outside the base model)."""
    return name[1:] if name.startswith("~") else prefix + name


def _linear(src: HFTensors, name: str, out_dim: int, in_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return src.take(f"{name}.weight", (out_dim, in_dim)), src.take(f"{name}.bias", (out_dim,))


@dataclass(frozen=True)
class HeadLayout:
    """Where one zoo head keeps its tensors in the family's transformers class. Names are as `HFTensors` reads
    them: inside the base model (`pooler.dense`) or, with `~`, beside it (`~classifier`)."""

    head: str  # zoo model.head
    proj: str | None = None  # Linear -> head.proj (classifier / token_classifier / qa)
    proj_rows: int | None = None  # fixed output size (qa: start, end); None: model.num_labels
    proj_bias: bool = True  # whether the projection has a bias (a decoder's `score` has none)
    pooler: str | None = None  # dense before the projection (or a bare model's pooler) -> head.pool
    activation: str | None = None  # the pooler's activation -> model.head_pooler
    pooler_optional: bool = False  # a bare model keeps the pooler only when its file has one
    bare: bool = False  # the class is the base model itself: its tensors are stored without the prefix
    prefix: str | None = None  # the class's base-model prefix when not the family's first (LlamaForQA: transformer.)
    labelled: bool = False  # outputs are named classes: config.json's id2label / label2id
    unused: Mapping[str, str] = field(default_factory=dict)  # tensors the class has and zoo does not use

    def config(self, hf: Mapping[str, Any], family: HeadedFamily) -> dict[str, Any]:
        """The model config keys of this head read from config.json `hf`."""
        keys: dict[str, Any] = {"head": self.head, "num_labels": num_labels(hf), "head_proj_bias": self.proj_bias,
                                "head_pooler": self.activation if self.pooler else NO_POOLER}
        return {k: v for k, v in keys.items() if k == "head" or k in HEADS.get(self.head).reads}

    def origins(self) -> dict[str, str]:
        """zoo tensor -> the tensor of the transformers class it is (layout names)."""
        pairs = {"head.pool": self.pooler, "head.proj": self.proj}
        out = {f"{z}.{part}": f"{h}.{part}" for z, h in pairs.items() if h for part in ("weight", "bias")}
        return out if self.proj_bias else {k: v for k, v in out.items() if k != "head.proj.bias"}

    def fitted(self, cfg: ModelConfig, has_pooler: bool) -> ModelConfig:
        """`cfg` for weights with or without a pooler: a bare model whose file has none gets none."""
        if self.pooler_optional and not has_pooler and cfg.head_pooler != NO_POOLER:
            return ModelConfig.from_dict({**cfg.to_dict(), "head_pooler": NO_POOLER})
        return cfg

    def has_pooler(self, src: HFTensors) -> bool:
        return self.pooler is not None and src.has(f"{self.pooler}.weight")

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor]) -> None:
        d = cfg.d_model
        if self.pooler is not None and cfg.head_pooler != NO_POOLER:
            out["head.pool.weight"], out["head.pool.bias"] = _linear(src, self.pooler, d, d)
        if self.proj is not None:
            rows = self.proj_rows or cfg.num_labels
            out["head.proj.weight"] = src.take(f"{self.proj}.weight", (rows, d))
            if self.proj_bias:
                out["head.proj.bias"] = src.take(f"{self.proj}.bias", (rows,))

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str,
              out: dict[str, torch.Tensor]) -> None:
        for zoo_name, name in self.origins().items():
            if zoo_name in state:  # a bare model without a pooler has no head.pool
                out[stored_name(name, prefix)] = state[zoo_name]


def num_labels(hf: Mapping[str, Any]) -> int:
    """The label count of a labelled head: config.json's id2label, else num_labels, else transformers' 2."""
    id2label = hf.get("id2label")
    if isinstance(id2label, Mapping) and id2label:
        return len(id2label)
    return int(hf.get("num_labels", 2))


def label_names(hf: Mapping[str, Any]) -> list[str] | None:
    """config.json's id2label as a list (index = class id); None when absent or not ids 0..n-1."""
    id2label = hf.get("id2label")
    if not isinstance(id2label, Mapping) or not id2label:
        return None
    try:
        by_id = {int(k): str(v) for k, v in id2label.items()}
    except (TypeError, ValueError):
        return None
    return [by_id[i] for i in range(len(by_id))] if set(by_id) == set(range(len(by_id))) else None


def label_maps(names: Sequence[str] | None, n: int, where: str) -> dict[str, Any]:
    """config.json's id2label / label2id for `n` classes named `names` (transformers' LABEL_i when None)."""
    names = list(names) if names is not None else [f"LABEL_{i}" for i in range(n)]
    if len(names) != n:
        raise ValueError(f"{where}: {len(names)} label names {names[:6]} for a head of model.num_labels={n}; give "
                         f"one name per class.")
    if len(set(names)) != n:
        raise ValueError(f"{where}: label names {names} repeat a name; label2id needs each name once.")
    return {"id2label": {str(i): name for i, name in enumerate(names)},
            "label2id": {name: i for i, name in enumerate(names)}}


class PretrainedState(dict):
    """A zoo state dict read from a Hugging Face folder, with where its head tensors came from (`origins`:
    zoo name -> the class's tensor name) so `init_from` reuses a head tensor only where transformers would."""

    def __init__(self, state: Mapping[str, torch.Tensor], origins: Mapping[str, str]) -> None:
        super().__init__(state)
        self.origins = dict(origins)


class HeadedFamily(Family):
    """A family whose `architectures` choose the head. Subclasses set `class_prefix`, `lm_suffixes` and
    `heads`, and implement `base_from_hf` / `base_to_hf` (embeddings and layers); loading and export of every
    head go through the layouts."""

    class_prefix: str = ""  # "Bert": BertModel, BertForMaskedLM, ...
    lm_suffixes: tuple[str, ...] = ("ForMaskedLM",)  # the CLASS_HEADS suffixes of this family's LM; first exported
    heads: Mapping[str, HeadLayout] = {}
    not_loaded: Mapping[str, str] = {}  # transformers classes of the family zoo does not load -> why (in the error)

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------- classes
    def classes(self) -> dict[str, str]:
        """Every transformers class this family loads -> its zoo head; the first per head is the export class."""
        suffixes = [*self.lm_suffixes, *(s for s, h in CLASS_HEADS.items() if h != "lm")]
        return {self.class_prefix + s: CLASS_HEADS[s] for s in suffixes if CLASS_HEADS[s] in self.heads}

    def class_for(self, head: str) -> str:
        """The transformers class an export of `head` is written as."""
        found = [name for name, h in self.classes().items() if h == head]
        if not found:
            raise ValueError(f"This zoo model cannot be exported as {self.model_type!r}: model.head={head!r} has no "
                             f"{self.model_type} class; heads it has: {', '.join(self.heads)}.")
        return found[0]

    def layout(self, hf: Mapping[str, Any]) -> HeadLayout:
        """The head config.json's `architectures` names; one error naming an unknown class and listing these."""
        named = hf.get("architectures") or [self.class_for("lm")]
        classes = self.classes()
        unknown = [a for a in named if a not in classes]
        heads = {classes[a] for a in named if a in classes}
        if unknown or len(heads) != 1:
            why = "".join(f" {name}: {self.not_loaded[name]}." for name in unknown if name in self.not_loaded)
            raise ValueError(f"{self.model_type} config.json names architectures={list(named)}: zoo loads one "
                             f"{self.model_type} class of: {', '.join(classes)}.{why}")
        return self.heads[heads.pop()]

    def head_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        """The head's model config keys read from config.json."""
        return self.layout(hf).config(hf, self)

    def head_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """config.json keys that say the head: `architectures`, and a classifier's label maps (LABEL_i here;
        save_pretrained writes the real names)."""
        return {"architectures": [self.class_for(cfg.head)], **self.label_config(cfg, None)}

    # ------------------------------------------------------------------------------------- tensors
    def fitted(self, cfg: ModelConfig, src: HFTensors) -> ModelConfig:
        """`cfg` for the tensors in `src` (a bare model keeps a pooler only where its file has one)."""
        layout = self.heads[cfg.head]
        return layout.fitted(cfg, layout.has_pooler(src))

    def state_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """Base model, then the head. With `src.head_optional` (init_from), head tensors the file lacks are left
        out (they are made fresh) instead of failing."""
        layout = self.heads[cfg.head]
        out = self.base_from_hf(src, cfg)
        before = len(src.missing)
        layout.from_hf(src, cfg, out)  # the head's tensors join the base's (a tied LM head reads the token table)
        origins = {k: v for k, v in layout.origins().items() if k in out}
        if src.head_optional and len(src.missing) > before:
            src.new_head = src.missing[before:]
            del src.missing[before:]
            for key in [k for k, name in origins.items() if src.key(name) in src.new_head]:
                del out[key], origins[key]
        src.finish(layout.unused)
        return PretrainedState(out, origins)

    def state_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """The class's names: a bare model (head none) stores its base without the prefix, as transformers does."""
        layout = self.heads[cfg.head]
        prefix = "" if layout.bare else self.prefixes[0] if layout.prefix is None else layout.prefix
        out = self.base_to_hf(state, cfg, prefix)
        layout.to_hf(state, cfg, prefix, out)
        return out

    def read_back(self, hf: dict[str, Any], cfg: ModelConfig) -> ModelConfig:
        """config.json cannot say whether a bare model has a pooler (its weights do): read back as `cfg` has."""
        back = self.config_from_hf(hf)
        return self.heads[back.head].fitted(back, has_pooler=cfg.head_pooler not in (None, NO_POOLER))

    def label_names(self, hf: dict[str, Any], cfg: ModelConfig) -> list[str] | None:
        names = label_names(hf) if self.heads[cfg.head].labelled else None
        return names if names is not None and len(names) == cfg.num_labels else None

    def label_config(self, cfg: ModelConfig, names: Sequence[str] | None) -> dict[str, Any]:
        layout = self.heads.get(cfg.head)
        if layout is None or not layout.labelled:
            return {}
        return label_maps(names, cfg.num_labels, f"export of model.head={cfg.head} as {self.class_for(cfg.head)}")

    def head_origins(self, head: str) -> dict[str, str]:
        """zoo head tensor -> the tensor of this family's `head` class it is read from."""
        return self.heads[head].origins() if head in self.heads else {}
