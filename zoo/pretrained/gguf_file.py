"""GGUF both ways, through the Hugging Face family tables: a zoo decoder is converted to its family's
config.json and tensors (save_pretrained's conversion), and those to llama.cpp's metadata keys, tensor names
and q/k layout (gguf_arch.py), stored as f32, f16, q8_0 or q4_0 with the `gguf` package; reading is the same
path backwards, every tensor dequantised to float32. Every check (family, head, dtype, knobs llama.cpp has no
key for, the tokenizer) runs before a byte is written."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zoo.config import ModelConfig
from zoo.models import ZooModel, build_model
from zoo.pretrained.family import FAMILIES, Family, HFTensors
from zoo.pretrained.gguf_arch import (
    ARCHS,
    READS,
    GGUFArch,
    arch_for,
    arch_named,
    float32,
    rotary_halves,
    rotary_pairs,
)
from zoo.pretrained.roundtrip import check_roundtrip
from zoo.quantization import float_state_dict
from zoo.tokenizers.gguf_vocab import GGUF_ROLES, GGUFVocab, gguf_vocab, tokenizer_from_gguf

GGUF_FILE = "model.gguf"
MARK = "zoo.export"  # a custom key (llama.cpp ignores keys it does not know): which zoo export wrote the file
QUANT_BLOCK = 32  # q8_0 and q4_0 quantise rows in blocks of 32 values
# dtype= -> (gguf.GGMLQuantizationType name, gguf.LlamaFileType name)
DTYPES = {"f32": ("F32", "ALL_F32"), "f16": ("F16", "MOSTLY_F16"), "q8_0": ("Q8_0", "MOSTLY_Q8_0"),
          "q4_0": ("Q4_0", "MOSTLY_Q4_0")}
SPECIAL_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "pad_token_id"}  # role -> config.json



def check_dtype(dtype: str) -> str:
    """`dtype` if GGUF export writes it; ValueError naming the allowed ones."""
    if dtype not in DTYPES:
        raise ValueError(f"GGUF export dtype={dtype!r} is not supported; allowed: {', '.join(DTYPES)}.")
    return dtype


@dataclass
class GGUFPlan:
    """Everything a GGUF file holds, converted and checked, before it is written."""

    arch: GGUFArch
    metadata: dict[str, Any]
    vocab: GGUFVocab
    tensors: dict[str, tuple[np.ndarray, str]]  # GGUF name -> (data, GGMLQuantizationType name)
    dtype: str


def plan_gguf(model: ZooModel, tokenizer, dtype: str, model_type: str | None = None) -> GGUFPlan:
    """The GGUF of `model` and `tokenizer` in `dtype`; ValueError naming the first thing GGUF cannot carry."""
    check_dtype(dtype)
    cfg = model.config
    if cfg.head.name != "lm":
        raise ValueError(f"GGUF export writes causal language models; this model has model.head="
                         f"{cfg.head.name!r} (allowed: lm).")
    vocab = gguf_vocab(tokenizer, cfg.vocab_size)
    family, arch = _family(model, cfg, vocab, model_type)
    hf = family.config_to_hf(cfg)
    _check_roundtrip(family, arch, cfg, hf, vocab)
    state = {k: t.detach().float() for k, t in float_state_dict(model).items()}
    with torch.no_grad():
        tensors = family.state_to_hf(state, cfg)
    names = _names(arch, cfg.n_layers, tensors)
    out = {names[k]: _stored(_to_gguf_layout(arch, hf, k, t), dtype) for k, t in tensors.items()}
    metadata = {**arch.metadata(hf), "general.name": model_name(family.model_type, vocab)}
    return GGUFPlan(arch, metadata, vocab, out, dtype)


# llama.cpp looks tokens up by text when `general.name` contains one of these words, and fails to load a file
# whose vocabulary lacks one ("error loading model vocabulary: unordered_map::at"; llama-vocab.cpp's
# Phi-3 RSTRIP fix-up): word -> the tokens it needs
LLAMA_CPP_NAMED_TOKENS = {"phi3": ("</s>", "<unk>", "<s>", "<|endoftext|>"),
                          "phi-3": ("</s>", "<unk>", "<s>", "<|endoftext|>")}


def model_name(model_type: str, vocab: GGUFVocab) -> str:
    """`general.name`: 'zoo <family>', or plain 'zoo' where the family's name would make llama.cpp look up
    tokens this vocabulary does not hold (a Phi-3 layout with zoo's own BPE)."""
    name = f"zoo {model_type}"
    held = set(vocab.tokens)
    tripped = [w for w, needs in LLAMA_CPP_NAMED_TOKENS.items()
               if w in name.lower() and not held >= set(needs)]
    return "zoo" if tripped else name


def without_idle_window(cfg: ModelConfig, arch: GGUFArch) -> ModelConfig:
    """`cfg` without a sliding window no shorter than the context (it masks nothing: the same model) where
    `arch` has no key for a window (Mistral's, written as llama.cpp's llama)."""
    window = getattr(cfg.mixer, "sliding_window", None)
    if window is None or window < cfg.max_seq_len or "sliding_window" in arch.keys.values():
        return cfg
    return dataclasses.replace(cfg, mixer=dataclasses.replace(cfg.mixer, sliding_window=None))


def _family(model: ZooModel, cfg: ModelConfig, vocab: GGUFVocab,
            model_type: str | None) -> tuple[Family, GGUFArch]:
    """The family `model_type` names, else the one the model was read from, else the first GGUF family
    whose knobs fit (ValueError naming each family's reason)."""
    read_as = getattr(model, "pretrained_family", None)
    chosen = model_type or (read_as if read_as in ARCHS else None)
    if chosen is not None:
        return FAMILIES.get(arch_for(chosen).family)(), arch_for(chosen)
    reasons = []
    for name, arch in READS.items():  # one try per llama.cpp architecture
        family = FAMILIES.get(arch.family)()
        try:
            _check_roundtrip(family, arch, cfg, family.config_to_hf(cfg), vocab)
            return family, arch
        except ValueError as err:
            reasons.append(f"{name}: {err}")
    raise ValueError("No GGUF architecture can represent this zoo model:\n  " + "\n  ".join(reasons))


def _check_roundtrip(family: Family, arch: GGUFArch, cfg: ModelConfig, hf: dict, vocab: GGUFVocab) -> None:
    """The GGUF metadata of `cfg` must read back as `cfg` (zoo's export round trip, roundtrip.py): a knob
    llama.cpp has no key for is named instead of silently dropped."""
    cfg = without_idle_window(cfg, arch)
    back = _config_json(arch, arch.metadata(hf), vocab.special_ids, tied=cfg.tie_embeddings)
    reader = FAMILIES.get(arch.family)()  # the family the file reads back as (Mistral: llama)
    check_roundtrip(cfg, reader.read_back(back, cfg), f"{arch.name} GGUF", family.same_model,
                    holder=f"llama.cpp's {arch.name} metadata")


def _config_json(arch: GGUFArch, metadata: Mapping[str, Any], special_ids: Mapping[str, int],
                 tied: bool) -> dict[str, Any]:
    """The config.json a GGUF of `arch` with `metadata` and these special ids reads as."""
    family = FAMILIES.get(arch.family)()
    ids = {SPECIAL_KEYS[role]: i for role, i in special_ids.items() if role in SPECIAL_KEYS}
    if "pad" not in special_ids and "eos" in special_ids:  # zoo pads with EOS where a tokenizer has no pad
        ids["pad_token_id"] = special_ids["eos"]
    return {**arch.config(metadata, tied), **ids, "architectures": [family.class_for("lm")]}


def _names(arch: GGUFArch, n_layers: int, tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Hugging Face tensor name -> llama.cpp's (the `gguf` package's map); ValueError naming one it lacks."""
    import gguf

    table = gguf.get_tensor_name_map(_model_arch(arch.name), n_layers)
    out = {}
    for name in tensors:
        stem, _, suffix = name.rpartition(".")
        found = table.get_name(stem)
        if found is None:
            raise ValueError(f"llama.cpp's {arch.name} has no tensor for {name!r}; GGUF cannot carry it.")
        out[name] = f"{found}.{suffix}"
    return out


def _model_arch(name: str):
    import gguf

    return next(key for key, value in gguf.MODEL_ARCH_NAMES.items() if value == name)


def _to_gguf_layout(arch: GGUFArch, hf: Mapping[str, Any], name: str, t: torch.Tensor) -> torch.Tensor:
    """llama.cpp's llama rotates interleaved pairs: q and k rows (weights, biases) are reordered per head."""
    heads = _rotated_heads(arch, hf, name)
    return arch.stored(name, rotary_pairs(t, heads) if heads else t)


def _rotated_heads(arch: GGUFArch, hf: Mapping[str, Any], name: str) -> int | None:
    if not arch.permute_qk:
        return None
    if ".q_proj." in name:
        return hf["num_attention_heads"]
    if ".k_proj." in name:
        return hf.get("num_key_value_heads") or hf["num_attention_heads"]
    return None


def _stored(t: torch.Tensor, dtype: str) -> tuple[np.ndarray, str]:
    """The bytes of one tensor as llama.cpp's converter stores them: 1-D (norms, biases) in f32, matrices in
    `dtype`; a matrix whose rows are not whole blocks of 32 falls back to f16, as llama.cpp's does."""
    import gguf

    data = t.contiguous().numpy().astype(np.float32)
    kind = DTYPES[dtype][0]
    if data.ndim == 1 or kind == "F32":
        return data, "F32"
    if kind == "F16" or data.shape[-1] % QUANT_BLOCK:
        return data.astype(np.float16), "F16"
    return gguf.quants.quantize(data, gguf.GGMLQuantizationType[kind]), kind


def write_gguf(plan: GGUFPlan, path: Path) -> None:
    """Write `plan` to `path` (the caller publishes it: zoo.atomic)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), plan.arch.name)
    writer.add_string("general.name", plan.metadata["general.name"])
    writer.add_string(MARK, "gguf")
    for key, value in plan.metadata.items():
        if key != "general.name":
            (writer.add_float32 if isinstance(value, float) else writer.add_uint32)(key, value)
    writer.add_file_type(gguf.LlamaFileType[DTYPES[plan.dtype][1]])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _write_vocab(writer, plan.vocab)
    for name, (data, kind) in plan.tensors.items():
        writer.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _write_vocab(writer, vocab: GGUFVocab) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    writer.add_token_merges(vocab.merges)
    for role, token_id in vocab.special_ids.items():
        getattr(writer, f"add_{role}_token_id")(token_id)
    writer.add_add_bos_token(vocab.add_bos)
    writer.add_add_eos_token(vocab.add_eos)
    if vocab.chat_template is not None:
        writer.add_chat_template(vocab.chat_template)


# ----- reading -----
def read_gguf(path: str | Path) -> tuple[Family, ModelConfig, dict[str, torch.Tensor]]:
    """A GGUF file's family, zoo config and zoo state dict (every tensor dequantised to float32); ValueError
    naming the file for an architecture or tensor zoo does not read."""
    import gguf

    file = str(path)
    reader = gguf.GGUFReader(file)
    meta = {key: _value(field) for key, field in reader.fields.items()
            if not key.startswith("tokenizer.ggml.") or key.endswith("_token_id")}  # not the vocabulary
    arch = arch_named(meta.get("general.architecture"), file)
    names = [t.name for t in reader.tensors]
    specials = {role: meta[f"tokenizer.ggml.{key}_token_id"] for role, key in GGUF_ROLES.items()
                if f"tokenizer.ggml.{key}_token_id" in meta}
    hf = _config_json(arch, meta, specials, tied="output.weight" not in names)
    family = FAMILIES.get(arch.family)()
    try:
        config = family.config_from_hf(hf)
    except (KeyError, ValueError) as err:  # a key missing or a value zoo cannot build
        missing = err.args[0] if isinstance(err, KeyError) and not isinstance(err, ValueError) else None
        keys = [f"{arch.name}.{k}" for k, name in arch.keys.items() if name == missing]
        why = f"it has no {' / '.join(keys) or repr(missing)}" if missing is not None else str(err)
        raise ValueError(f"{file}: its {arch.name} metadata does not describe a model zoo builds: "
                         f"{why}.") from None
    with torch.device("meta"):
        shapes = build_model(config).state_dict()
    hf_names = _names(arch, config.n_layers, family.state_to_hf(shapes, config))
    by_gguf = {g: h for h, g in hf_names.items()}
    unknown = [n for n in names if n not in by_gguf]
    if unknown:
        raise ValueError(f"{file} holds tensors a {arch.name} model of its metadata does not have: "
                         f"{unknown[:5]}.")
    tensors = {}
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        t = torch.from_numpy(np.array(data, dtype=np.float32))  # a writable copy
        name = by_gguf[tensor.name]
        heads, t = _rotated_heads(arch, hf, name), arch.stored(name, t, reading=True)
        tensors[name] = rotary_halves(t, heads) if heads else t
    src = HFTensors(tensors, file, family.prefixes)
    config = family.fitted(config, src)
    with torch.no_grad():
        state = family.state_from_hf(src, config)
    return family, config, state


def read_gguf_tokenizer(path: str | Path):
    """The ZooTokenizer a GGUF file carries (zoo.tokenizers.gguf_vocab.tokenizer_from_gguf)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    meta = {key: _value(field) for key, field in reader.fields.items() if key.startswith("tokenizer.")}
    return tokenizer_from_gguf(meta, str(path))


def _value(field) -> Any:
    """One metadata value of a gguf.ReaderField: a number, a string or a list of them."""
    import gguf

    parts = [field.parts[i] for i in field.data]
    kind = field.types[-1] if field.types else None
    values = [bytes(p).decode("utf-8") if kind == gguf.GGUFValueType.STRING
              else float32(p[0]) if kind == gguf.GGUFValueType.FLOAT32 else p.tolist()[0] for p in parts]
    return values if field.types and field.types[0] == gguf.GGUFValueType.ARRAY else values[0]
