"""`init_from=PATH`: start training from pretrained weights. PATH is a Hugging Face folder (config.json with
a `model_type`, weights, usually tokenizer files), a zoo training checkpoint (`.ckpt`), a zoo export folder or
a llama.cpp `.gguf` file.
Each kind is a `Source` registered in SOURCES that recognises its paths and gives the model config, the
weights (as a zoo state dict) and the tokenizer config of that path."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.tokenizers import ZooTokenizer
from zoo.utils import some


class InitError(ValueError):
    """init_from names something that cannot start a run (missing, corrupt, or not a model)."""


class Source:
    """One kind of init_from path. Each file of it is read once: what a check reads stays on the instance for
    the run's open step (the weights, the tokenizer)."""

    kind = ""

    def __init__(self, path: Path, meta: Any = None) -> None:
        self.path = path
        self.meta = meta  # the folder's config.json, parsed once by open_source (None: no such JSON object)
        self.model_type: str | None = None  # the HF family the weights came in (export writes it back)

    @staticmethod
    def recognises(path: Path, meta: Any) -> bool:
        """Whether `path` (its config.json parsed as `meta`, None when it has none) is of this kind."""
        raise NotImplementedError

    def config(self) -> ModelConfig:
        raise NotImplementedError

    def state(self) -> dict[str, torch.Tensor]:
        """The weights as a zoo state dict for `config()` (LoRA adapters of a checkpoint merged in)."""
        raise NotImplementedError

    def weights(self) -> dict[str, torch.Tensor]:
        """`state()` for a reader that takes the tensors one at a time (zoo.finetune.lean): a kind that can
        map its file gives tensors read from disk when touched, and builds no model to get them."""
        return self.state()

    def has_tokenizer(self) -> bool:
        """Whether the tokenizer the model was trained with is shipped with it."""
        raise NotImplementedError

    def head_keys(self, head: str) -> dict[str, Any]:
        """Config keys of a new `head` as the source's family builds it (DistilBERT's classifier pools with
        ReLU, BERT's with tanh), laid under the user's; {} when the source has no say."""
        return {}

    def label_names(self) -> list[str] | None:
        """The names of the head's outputs (index = output) when the source names them; None otherwise."""
        return None

    def tokenizer_cfg(self, workdir: Path) -> dict[str, Any]:
        """The `tokenizer` config that loads the shipped tokenizer; `workdir` is where a tokenizer stored
        inside a file is written out."""
        raise NotImplementedError

    @functools.cached_property
    def shipped_tokenizer(self) -> ZooTokenizer:
        """The tokenizer shipped with the model, built once: sized before any data, then the run's."""
        from zoo.tokenizers import build_tokenizer

        return build_tokenizer(self.tokenizer_cfg(self.path), [])  # no workdir used

    def tokenizer_size(self) -> int | None:
        """Tokens of the shipped tokenizer, read from its files before any data; None when none is shipped or
        its size is known only once loaded (a training checkpoint's, built together with its model)."""
        return self.shipped_tokenizer.vocab_size if self.has_tokenizer() else None


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


class HuggingFaceFolder(Source):
    kind = "Hugging Face folder"

    @staticmethod
    def recognises(path: Path, meta: Any) -> bool:
        return isinstance(meta, dict) and "model_type" in meta

    @functools.cached_property
    def hf(self):
        """config.json as zoo.pretrained reads it (checked against the weights' save), parsed once."""
        from zoo.pretrained.io import read_config

        return read_config(self.path, parsed=self.meta)

    @functools.cached_property
    def family(self):
        from zoo.pretrained.api import family_for

        return family_for(self.hf["model_type"])

    def config(self) -> ModelConfig:
        return self._config

    @functools.cached_property
    def _config(self) -> ModelConfig:
        """config.json's model, its layer count checked against the weights' headers before anything is
        built (zoo.pretrained.headers)."""
        from zoo.pretrained.api import load_config

        return load_config(self.path, self.hf)[1]

    def state(self) -> dict[str, torch.Tensor]:
        """The folder's weights; a head its file lacks (a bare model saved under a head class) is left out,
        to be made fresh, since the task may replace it anyway."""
        from zoo.pretrained.api import read_pretrained

        read = read_pretrained(self.path, head_optional=True, hf=self.hf)
        self.model_type = read.family.model_type
        return read.state

    def has_tokenizer(self) -> bool:
        return (self.path / "tokenizer.json").is_file()

    def head_keys(self, head: str) -> dict[str, Any]:
        layout = self.family.heads.get(head)  # zoo.pretrained.heads.HeadLayout
        keys = layout.config(self.hf, self.family) if layout is not None else {}
        # the head's own keys (dotted, as the family tables write them); the data gives num_labels
        return {k.removeprefix("head."): v for k, v in keys.items()
                if k.startswith("head.") and k != "head.num_labels"}

    def label_names(self) -> list[str] | None:
        """config.json's id2label, for a labelled head (*ForSequenceClassification, *ForTokenClassification);
        transformers' generic LABEL_i when it names none (transformers 5 leaves a default id2label out)."""
        cfg = self.config()
        layout = self.family.heads.get(cfg.head.name)
        if layout is None or not layout.labelled:
            return None
        return self.family.label_names(self.hf, cfg) or [f"LABEL_{i}" for i in range(cfg.head.num_labels)]

    def tokenizer_cfg(self, workdir: Path) -> dict[str, Any]:
        return {"name": "hf", "path": str(self.path)}


class ZooSaved(Source):
    """A zoo training checkpoint or export folder: zoo.loader reads both (and merges LoRA adapters)."""

    def config(self) -> ModelConfig:
        return self.loaded[0].config

    def state(self) -> dict[str, torch.Tensor]:
        return dict(self.loaded[0].state_dict())

    @property
    def shipped_tokenizer(self) -> ZooTokenizer:
        return self.loaded[1]

    @functools.cached_property
    def loaded(self) -> tuple[torch.nn.Module, ZooTokenizer]:
        """(model, tokenizer) as zoo.loader restores them, loaded once."""
        model, tokenizer = self._load()
        self.model_type = model.pretrained_family
        return model, tokenizer


class ZooCheckpoint(ZooSaved):
    kind = "zoo checkpoint"

    @staticmethod
    def recognises(path: Path, meta: Any) -> bool:
        from zoo.checkpoint import is_sharded

        return path.is_file() or is_sharded(path)  # a file, or a sharded run's folder (trainer=fsdp|fsdp_tp)

    @functools.cached_property
    def checkpoint(self):
        """The checkpoint, read once (zoo.checkpoint.Checkpoint); a file's tensors mapped, read when touched
        (the optimizer state it also holds is never read)."""
        from zoo.checkpoint import Checkpoint

        return Checkpoint.read(self.path, mmap=_zip_file(self.path))  # torch.load maps zip files only

    def weights(self) -> dict[str, torch.Tensor]:
        """The saved model tensors as mapped (no model built) for a checkpoint of one file without LoRA
        adapters to merge; `state()` otherwise."""
        from zoo.checkpoint import Checkpoint, CheckpointRecord, model_state

        record, data = self.checkpoint.record, self.checkpoint.data
        if not self.path.is_file() or record.lora is not None:
            return self.state()
        self.model_type = record.hf_model_type
        state = model_state(data.pop("state_dict"))  # held by the reader alone
        # what the run keeps of the file is its zoo section, copied out of the mapping (its RNG states are
        # tensors), so the file is unmapped once the weights are placed; the optimizer's state goes unread
        section = _copied(data["zoo"])
        self.checkpoint = Checkpoint(self.path, {"zoo": section}, CheckpointRecord.from_dict(section))
        return state

    @functools.cached_property
    def shipped_tokenizer(self) -> ZooTokenizer:
        """The checkpoint's tokenizer (from its record: no model built for it)."""
        from zoo.loader import checkpoint_tokenizer

        if "loaded" in self.__dict__:
            return self.loaded[1]
        return checkpoint_tokenizer(self.checkpoint)

    def config(self) -> ModelConfig:
        from zoo.checkpoint import saved_model_config

        if "loaded" in self.__dict__:
            return self.loaded[0].config
        return saved_model_config(self.checkpoint.record.model_config, f"{self.path}: zoo.model_config")

    def _load(self):
        from zoo.loader import from_checkpoint

        loaded = from_checkpoint(self.checkpoint)
        del self.checkpoint  # its weights are in the model now; its optimizer state is not kept for the run
        return loaded

    def has_tokenizer(self) -> bool:
        return True  # a training checkpoint always holds its tokenizer's files

    def tokenizer_cfg(self, workdir: Path) -> dict[str, Any]:
        folder = workdir / "init_tokenizer"
        self.shipped_tokenizer.save(folder)  # the checkpoint holds its tokenizer's files as text
        return {"name": "file", "path": str(folder)}

    def tokenizer_size(self) -> int | None:
        return None  # known once the checkpoint's model is loaded (at run time)


def _copied(value: Any) -> Any:
    """`value` (nested dicts, lists, tuples) with every tensor copied (out of a mapped file)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return value


def _zip_file(path: Path) -> bool:
    """Whether `path` is a file torch.save wrote as a zip archive (not a legacy pickle)."""
    from zoo.checkpoint import PYTORCH_HEADS

    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == PYTORCH_HEADS[0]


class ZooExport(ZooSaved):
    kind = "zoo export"

    @staticmethod
    def recognises(path: Path, meta: Any) -> bool:
        return isinstance(meta, dict) and "model_config" in meta

    def has_tokenizer(self) -> bool:
        return (self.path / "tokenizer" / "tokenizer.json").is_file()

    def tokenizer_cfg(self, workdir: Path) -> dict[str, Any]:
        return {"name": "file", "path": str(self.path / "tokenizer")}

    def _load(self):
        from zoo.loader import from_export

        return from_export(self.path, self.meta)  # config.json parsed once, by open_source


class GGUFFile(Source):
    """A llama.cpp GGUF file (zoo.pretrained.gguf_file): weights dequantised to float32, its tokenizer rebuilt
    from the file's metadata."""

    kind = "GGUF file"

    @staticmethod
    def recognises(path: Path, meta: Any) -> bool:
        from zoo.pretrained.api import is_gguf

        return is_gguf(path)

    @functools.cached_property
    def read(self):
        """(family, config, state) of the file, read once."""
        from zoo.pretrained.gguf_file import read_gguf

        return read_gguf(self.path)

    def config(self) -> ModelConfig:
        return self.read[1]

    def state(self) -> dict[str, torch.Tensor]:
        self.model_type = self.read[0].model_type
        return self.read[2]

    def has_tokenizer(self) -> bool:
        return True  # a GGUF carries its tokenizer (GGUF export refuses one it cannot write)

    @functools.cached_property
    def shipped_tokenizer(self) -> ZooTokenizer:
        from zoo.pretrained.gguf_file import read_gguf_tokenizer

        return read_gguf_tokenizer(self.path)

    def tokenizer_cfg(self, workdir: Path) -> dict[str, Any]:
        folder = workdir / "init_tokenizer"
        self.shipped_tokenizer.save(folder)  # the file holds its tokenizer as metadata
        return {"name": "file", "path": str(folder)}


SOURCES: tuple[type[Source], ...] = (GGUFFile, ZooCheckpoint, ZooExport, HuggingFaceFolder)


def open_source(value: str) -> Source:
    """The Source for `init_from=value`, its config read (and so checked); InitError naming the path. A
    folder's config.json is parsed here, once, and tells the kinds apart."""
    path = Path(value).expanduser()
    if not path.exists():
        raise InitError(f"init_from={value}: no such file or folder")
    meta = _read_json(path / "config.json") if path.is_dir() else None
    found = next((cls for cls in SOURCES if cls.recognises(path, meta)), None)
    if found is None:
        present = ", ".join(sorted(p.name for p in path.iterdir())[:8]) if path.is_dir() else ""
        raise InitError(f"init_from={value}: not a model: expected a Hugging Face folder (config.json with a "
                        f"model_type, weights), a zoo checkpoint (.ckpt), a zoo export folder or a GGUF file"
                        + (f" (found: {present or 'nothing'})" if path.is_dir() else ""))
    source = found(path, meta)
    try:
        source.config()
    except (ValueError, OSError) as e:
        raise InitError(f"init_from={value} ({source.kind}): {e}") from None
    return source


def load_state(source: Source, value: str, *, lean: bool = False) -> dict[str, torch.Tensor]:
    """The source's weights (`lean`: as `Source.weights` gives them); InitError naming the path for
    unreadable or mismatched weights."""
    try:
        return source.weights() if lean else source.state()
    except (ValueError, OSError) as e:
        raise InitError(f"init_from={value} ({source.kind}): {e}") from None


# ------------------------------------------------------------------------------------------- config


def meta_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name and shape of the model `cfg` builds (meta device: no memory, no init)."""
    from zoo.presets import build

    with torch.device("meta"):
        model = build(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def shape_changes(base: ModelConfig, key: str, value: Any) -> list[str]:
    """The tensors whose shape (or presence) setting `key=value` on `base` changes; [] when none does."""
    if key == "head":  # the head's keys only: a new head is made fresh
        return []
    before, after = meta_shapes(base), meta_shapes(ModelConfig.from_dict({**base.to_dict(), key: value}))
    return [f"{k} {before.get(k)} -> {after.get(k)}" for k in sorted(before.keys() | after.keys())
            if before.get(k) != after.get(k)]


def with_overrides(base: ModelConfig, overrides: Mapping[str, Any], source: str) -> ModelConfig:
    """`base` with the user's model.* overrides; ValueError naming the first key that changes a weight shape
    (and the tensor) or that is not a model key."""
    known = set(base.to_dict())
    for key, value in overrides.items():
        if key not in known:
            from zoo.options import unknown_key_message

            raise ValueError(unknown_key_message("model", key, known))
        if value == getattr(base, key):
            continue
        changed = shape_changes(base, key, value)
        if changed:
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            raise ValueError(f"model.{key}={value!r} would change the shape of the pretrained weights of "
                             f"{source}: {changed[0]}{more}; only overrides that keep every weight's shape "
                             "apply with init_from (e.g. model.dropout, model.attn_dropout)")
    return ModelConfig.from_dict({**base.to_dict(), **overrides})


def fixed_tokenizer_size(cfg: Mapping[str, Any]) -> int | None:
    """Tokens of a tokenizer read from files (tokenizer=hf / file), known before any data is read; None for
    one that learns its vocabulary from the data."""
    from zoo.tokenizers import build_tokenizer, trains

    return None if trains(cfg) else build_tokenizer(dict(cfg), []).vocab_size


def check_tokenizer_fits(source: Source, model: ModelConfig, value: str, given: Mapping[str, Any] | None
                         ) -> None:
    """Before any data is read: the tokenizer (the source's own, or `given`, read from files) has no more
    tokens than the model has embedding rows; each case is refused with advice that fits it."""
    rows, shipped = model.vocab_size, source.tokenizer_size()
    if given is None:
        if shipped is not None and shipped > rows:
            raise ValueError(f"init_from={value}: the tokenizer shipped in {source.kind} {value} has "
                             f"{shipped} tokens but its model has {rows} embedding rows (config vocab_size), "
                             "so the two do not belong together; give the tokenizer the model was trained "
                             f"with, of at most {rows} tokens: tokenizer=hf tokenizer.path=FOLDER or "
                             "tokenizer=file tokenizer.path=tokenizer.json")
        return
    size = fixed_tokenizer_size(given)
    if size is not None and size > rows:
        advice = (f"use the model's own tokenizer (leave tokenizer= unset) or one of at most {rows} tokens"
                  if shipped is not None and shipped <= rows else
                  f"give a tokenizer of at most {rows} tokens (the one the model was trained with)")
        raise ValueError(f"init_from={value}: the tokenizer given (tokenizer={given['name']}) has {size} "
                         f"tokens but the model has {rows} embedding rows (config vocab_size); {advice}")


def fit_to_tokenizer(pretrained: ModelConfig, completed: ModelConfig, tokenizer, source: str) -> ModelConfig:
    """The pretrained config (with the user's overrides) and what only the data knows (a new classifier
    head's num_labels). Its vocabulary size and special ids stay: a tokenizer may use fewer ids than the
    embedding table has rows (T5), never more; the special ids are those the weights were trained with (a
    Hugging Face config.json's, which its own tokenizer shares; BERT's config has no bos/eos to change)."""
    if tokenizer.vocab_size > pretrained.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model of "
                         f"init_from={source} has {pretrained.vocab_size} embedding rows; use the model's "
                         "own tokenizer (leave tokenizer= unset) or one of at most that size")
    if not hasattr(pretrained.head, "num_labels"):
        return pretrained
    return pretrained.with_head(num_labels=completed.head.num_labels)


def reusable_head(state: Mapping[str, torch.Tensor], cfg: ModelConfig, model_type: str | None
                  ) -> Mapping[str, torch.Tensor]:
    """`state` without the head tensors of a Hugging Face folder that `cfg`'s head does not read from the same
    checkpoint tensor, as transformers decides: BertModel's pooler is BertForSequenceClassification's, while
    RobertaModel's pooler is not RoBERTa's classifier dense and a QA projection is no classifier."""
    origins = getattr(state, "origins", None)  # zoo.pretrained.heads.PretrainedState
    if origins is None or model_type is None:
        return state
    from zoo.pretrained.api import family_for

    wanted = family_for(model_type).head_origins(cfg.head.name)
    return {k: v for k, v in state.items() if k not in origins or wanted.get(k) == origins[k]}


def usable_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor], source: str,
                 model_type: str | None = None) -> tuple[dict[str, torch.Tensor], list[str]]:
    """(the tensors of `state` that `model` (built, or on the meta device) loads, the names it has that
    `state` lacks). Only head tensors may be missing (a new head) or left over (the old head); anything else
    is an InitError naming them."""
    own = model.state_dict()
    state = reusable_head(state, model.config, model_type)
    usable = {k: v for k, v in state.items() if k in own and tuple(own[k].shape) == tuple(v.shape)}
    dropped = sorted(k for k in state if k not in usable)
    missing = sorted(k for k in own if k not in usable)
    bad = [k for k in (*dropped, *missing) if not k.startswith("head.")]
    if bad:
        raise InitError(f"init_from={source}: the weights do not fit the model: {some(bad, 5)}")
    return usable, missing


def build_initialised(cfg: ModelConfig, state: Mapping[str, torch.Tensor], source: str,
                      model_type: str | None = None) -> tuple[torch.nn.Module, list[str]]:
    """`cfg` built with `state` loaded, and the names of the parameters not loaded (fresh); InitError for
    weights that do not fit (usable_state)."""
    from zoo.presets import build

    model = build(cfg)
    usable, missing = usable_state(model, state, source, model_type)
    model.load_state_dict(usable, strict=False)
    if model_type is not None:
        model.pretrained_family = model_type
    names = {id(p): n for n, p in model.named_parameters()}
    fresh_ids = {id(p) for n, p in model.named_parameters(remove_duplicate=False) if n in missing}
    return model, sorted(names[i] for i in fresh_ids)
