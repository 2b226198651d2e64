"""config.json's sizes checked against the weight files before any model is built: the layer count against
the layers the tensor names hold (read from the safetensors headers, no tensor data: a config.json with a
million layers would otherwise be built, on the meta device, for minutes before its tensors are compared), and
a tensor whose shape disagrees named by the config.json key behind the size."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from zoo.config import ModelConfig, value_at
from zoo.pretrained.io import INDEX_FILES, WEIGHT_FILES, shard_names
from zoo.pretrained.tensor_map import Op, ShapeMismatch

Shapes = Mapping[str, tuple[int, ...]]
# zoo stack -> the ModelConfig keys that say its depth, most specific first
STACK_KEYS = {"encoder_stack": ("encoder_layers", "n_layers"),
              "decoder_stack": ("decoder_layers", "n_layers")}
STACKS = {"decoder": ("decoder_stack",), "encoder": ("encoder_stack",),
          "encoder_decoder": ("encoder_stack", "decoder_stack")}


def header_shapes(folder: Path) -> tuple[dict[str, tuple[int, ...]], Path] | None:
    """{tensor: shape} of the safetensors weights read_weights would read (single file or the shards its index
    names), from the headers alone, and the file it names; None for pickled weights (no header) or a file
    that does not open (read_weights names the problem)."""
    from safetensors import SafetensorError, safe_open

    single, index = folder / WEIGHT_FILES[0], folder / INDEX_FILES[0]
    if single.is_file():
        files, source = [single], single
    elif index.is_file():
        files, source = [folder / name for name in shard_names(index)], index
    else:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        for file in files:
            with safe_open(str(file), framework="pt") as f:
                shapes.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})
    except (SafetensorError, OSError):
        return None
    return shapes, source


@functools.lru_cache(maxsize=4096)
def _layer_regex(hf_name: str) -> re.Pattern:
    """A row's HF name as a pattern: `{i}` captures the layer index, other fields one name part."""
    body = re.escape(hf_name.lstrip("~"))
    body = re.sub(r"\\\{(\w+)\\\}", lambda m: r"(?P<i>\d+)" if m[1] == "i" else rf"(?P<{m[1]}>[^.]+)", body)
    return re.compile(rf"(?:^|\.){body}$")


def _hf_names(value: str | tuple[str, ...] | Op) -> tuple[str, ...]:
    return (value.hf,) if isinstance(value, Op) else (value,) if isinstance(value, str) else tuple(value)


def file_layers(rows: Mapping[str, str | tuple[str, ...] | Op], names: Iterable[str]) -> dict[str, int]:
    """zoo stack -> how many layers (highest index + 1) tensor `names` hold, by the rows naming a layer."""
    patterns = [(zoo.split(".", 1)[0], _layer_regex(hf)) for zoo, value in rows.items() if "{i}" in zoo
                for hf in _hf_names(value)]
    out = {stack: 0 for stack, _ in patterns if "{s}" not in stack}
    for name in names:
        for stack, pattern in patterns:
            found = pattern.search(name)
            if found:
                stack = stack.format(**{k: v for k, v in found.groupdict().items() if k != "i"})
                out[stack] = max(out.get(stack, 0), int(found["i"]) + 1)
                break
    return out


def _config_key(family, keys: Iterable[str], cfg: ModelConfig) -> tuple[str, str]:
    """(zoo key, how config.json spells it) for the first of `keys` the family reads: `num_hidden_layers=2
    (model.n_layers)`; a key config.json does not hold is named as zoo's."""
    table = {k.zoo: k.hf for k in family.keys}
    key = next((k for k in keys if k in table and value_at(cfg, k) is not None), next(iter(keys)))
    hf = table.get(key)
    return key, f"config.json {hf}" if hf else f"model.{key}"


def check_layers(family, cfg: ModelConfig, shapes: Shapes, source: Path) -> None:
    """Refuse a config.json whose layer count is not the one the weights hold, naming the key, its value and
    the layers `source` holds."""
    rows, stacks = family.tensor_map(cfg), STACKS.get(cfg.arch, ())
    extra = family.extra_tensors(shapes)
    held = file_layers(rows, [name for name in shapes if name not in extra])
    for stack in stacks:
        if stack not in held:  # the family maps no layer of this stack: nothing to count
            continue
        want = cfg.n_encoder_layers if stack == "encoder_stack" else cfg.n_decoder_layers
        if held[stack] != want:
            key, spelled = _config_key(family, STACK_KEYS[stack], cfg)
            side = stack.split("_")[0] if len(stacks) > 1 else ""
            n = held[stack]
            holds = (f"{side} layer 0 (1 layer)" if n == 1 else f"{side} layers 0-{n - 1} ({n} layers)" if n
                     else f"no {side} layer tensors").replace("  ", " ").strip()
            raise ValueError(f"{spelled}={want} (model.{key}) disagrees with the weights: {source} holds "
                             f"{holds}. Fix config.json, or use the weights it was saved with.")


def check_folder(family, cfg: ModelConfig, folder: Path) -> None:
    """check_layers from the safetensors headers of `folder`, before any tensor is read (pickled weights are
    checked once read)."""
    found = header_shapes(folder)
    if found is not None:
        check_layers(family, cfg, *found)


def size_keys(cfg: ModelConfig) -> list[tuple[tuple[str, ...], int]]:
    """(ModelConfig keys that say a size, most specific first; the size) for the sizes a tensor's shape holds
    (the heads' widths only where head_dim sets them apart from d_model)."""
    moe = cfg.ffn
    own_heads = [(("n_heads",), cfg.n_heads * cfg.head_size), (("head_dim",), cfg.head_size)]
    return [(("d_model",), cfg.d_model), (("vocab_size",), cfg.vocab_size), (("d_ff",), cfg.ffn_dim),
            *(own_heads if cfg.head_dim is not None else []),
            (("n_kv_heads", "n_heads"), cfg.kv_heads * cfg.head_size), (("max_seq_len",), cfg.max_seq_len),
            (("type_vocab_size",), cfg.type_vocab_size),
            *([(("head.num_labels",), cfg.head.num_labels)] if hasattr(cfg.head, "num_labels") else []),
            (("ffn.expert_d_ff", "d_ff"), getattr(moe, "expert_d_ff", None) or cfg.ffn_dim),
            (("ffn.n_experts",), getattr(moe, "n_experts", -1))]


def _named(family, keys: tuple[str, ...], cfg: ModelConfig) -> str:
    """`config.json hidden_size=320 (model.d_model)` for the first of `keys` set (a model.ffn key as
    itself)."""
    if keys[0].startswith("ffn.") and getattr(cfg.ffn, keys[0][4:], None) is not None:
        return f"model.{keys[0]}={value_at(cfg, keys[0])}"
    keys = tuple(k for k in keys if not k.startswith("ffn."))
    key, spelled = _config_key(family, keys, cfg)
    return f"{spelled}={value_at(cfg, key)} (model.{key})"


def explained(err: ShapeMismatch, family, cfg: ModelConfig) -> ValueError:
    """A tensor's shape mismatch named by the config.json key(s) whose size the file disagrees with (the
    original message when no size key explains it)."""
    wrong = {want for have, want in zip(err.have, err.want, strict=False) if have != want}
    if len(err.have) != len(err.want):
        wrong = set(err.want)
    named = list(dict.fromkeys(_named(family, keys, cfg) for keys, size in size_keys(cfg) if size in wrong))
    if not named:
        return ValueError(str(err))
    return ValueError(f"{' or '.join(named)} disagrees with the weights: tensor {err.key!r} in {err.source} "
                      f"has shape {err.have}, where config.json implies {err.want}.")
