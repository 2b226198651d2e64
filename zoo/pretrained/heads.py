"""Heads as the folder says. `CLASS_HEADS` is the one table from a transformers class-name suffix to zoo's
`model.head`; a family lists, per zoo head, where that head keeps its tensors in the family's class (a
`HeadLayout`), and loading, export and `init_from`'s reuse of head tensors are all derived from those
lists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.head_settings import HEAD
from zoo.modules.heads import NO_POOLER
from zoo.pretrained.tensor_map import HFTensors, load, save

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


@dataclass(frozen=True)
class HeadLayout:
    """Where one zoo head keeps its tensors in the family's transformers class. Names are as `HFTensors` reads
    them: inside the base model (`pooler.dense`) or, with `~`, beside it (`~classifier`)."""

    head: str  # zoo model.head
    proj: str | None = None  # Linear -> head.proj (classifier / token_classifier / qa)
    proj_bias: bool = True  # whether the projection has a bias (a decoder's `score` has none)
    pooler: str | None = None  # dense before the projection (or a bare model's pooler) -> head.pool
    activation: str | None = None  # the pooler's activation -> model.head.pooler
    pooler_optional: bool = False  # a bare model keeps the pooler only when its file has one
    bare: bool = False  # the class is the base model itself: its tensors are stored without the prefix
    prefix: str | None = None  # the class's base-model prefix when not the
                               # family's first (LlamaForQA: transformer.)
    labelled: bool = False  # outputs are named classes: config.json's id2label / label2id
    unused: Mapping[str, str] = field(default_factory=dict)  # tensors the class has and zoo does not use

    def config(self, hf: Mapping[str, Any], family: Any) -> dict[str, Any]:
        """The model config keys of this head read from config.json `hf`, as dotted paths ("head.pooler")."""
        return self.head_keys({"num_labels": num_labels(hf), "proj_bias": self.proj_bias,
                               "pooler": self.activation if self.pooler else NO_POOLER})

    def head_keys(self, keys: Mapping[str, Any]) -> dict[str, Any]:
        """{"head": name, "head.<key>": value} for the keys of `keys` this head reads (a bare model has no
        num_labels, an LM no pooler)."""
        reads = HEAD.keys(self.head)
        return {"head": self.head, **{f"head.{k}": v for k, v in keys.items() if k in reads}}

    def origins(self) -> dict[str, str]:
        """zoo tensor -> the tensor of the transformers class it is (layout names)."""
        pairs = {"head.pool": self.pooler, "head.proj": self.proj}
        out = {f"{z}.{part}": f"{h}.{part}" for z, h in pairs.items() if h for part in ("weight", "bias")}
        return out if self.proj_bias else {k: v for k, v in out.items() if k != "head.proj.bias"}

    def fitted(self, cfg: ModelConfig, has_pooler: bool) -> ModelConfig:
        """`cfg` for weights with or without a pooler: a bare model whose file has none gets none."""
        if self.pooler_optional and not has_pooler and cfg.head.pooler != NO_POOLER:
            return cfg.with_head(pooler=NO_POOLER)
        return cfg

    def has_pooler(self, src: HFTensors) -> bool:
        return self.pooler is not None and src.has(f"{self.pooler}.weight")

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor],
                shapes: Mapping[str, tuple[int, ...]]) -> None:
        """The head's tensors into `out` (`shapes`: the zoo model's; `origins` is the head's tensor map)."""
        out.update(load(self.origins(), src, shapes, cfg))

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str
              ) -> dict[str, torch.Tensor]:
        return save(self.origins(), state, cfg, prefix)


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
        raise ValueError(f"{where}: {len(names)} label names {names[:6]} for a head of "
                         f"model.head.num_labels={n}; give one name per class.")
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
