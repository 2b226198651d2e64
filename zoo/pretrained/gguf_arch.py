"""The llama.cpp architectures zoo writes and reads as GGUF, one table each: which Hugging Face family it is,
its metadata keys as config.json keys, the config.json values it always means, and whether q/k rows are
permuted (llama.cpp's `llama` rotates interleaved pairs, Hugging Face's Llama rotates halves). Tensor names
are the `gguf` package's own map (`gguf.get_tensor_name_map`), applied to the family's Hugging Face names, so
both directions come from one place; the export and the reader are zoo/pretrained/gguf_file.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

# GGUF metadata key (without the "<arch>." prefix) -> config.json key; each holds an integer or a float
COMMON_KEYS: dict[str, str] = {
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "attention.value_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
}
GPT2_KEYS: dict[str, str] = {
    "context_length": "n_positions", "embedding_length": "n_embd", "block_count": "n_layer",
    "feed_forward_length": "n_inner", "attention.head_count": "n_head",
    "attention.layer_norm_epsilon": "layer_norm_epsilon", "vocab_size": "vocab_size",
}
GEMMA_KEYS = {**COMMON_KEYS, "attention.sliding_window": "sliding_window"}
GEMMA2_KEYS = {**GEMMA_KEYS, "attn_logit_softcapping": "attn_logit_softcapping",
               "final_logit_softcapping": "final_logit_softcapping"}
FLOAT_KEYS = frozenset({"attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon", "rope.freq_base",
                        "attn_logit_softcapping", "final_logit_softcapping"})
# what every one of these architectures computes, whatever the file says: a gated SiLU MLP, plain RoPE
PLAIN_DECODER = {"hidden_act": "silu", "attention_dropout": 0.0}
GEMMA = {"hidden_activation": "gelu_pytorch_tanh", "attention_dropout": 0.0, "attention_bias": False,
         "use_bidirectional_attention": False}


@dataclass(frozen=True)
class GGUFArch:
    """One llama.cpp architecture as zoo writes it: `family` is the Hugging Face model_type whose tables
    convert the weights; `fixed` are config.json values a file of this architecture always loads as (a model
    whose config.json differs there is refused by the export's round trip, naming the key)."""

    name: str  # general.architecture
    family: str  # the Hugging Face model_type it reads back as
    keys: Mapping[str, str] = field(default_factory=lambda: COMMON_KEYS)
    fixed: Mapping[str, Any] = field(default_factory=lambda: PLAIN_DECODER)
    permute_qk: bool = False  # llama.cpp's LLAMA rope type: interleaved pairs, so q/k rows are permuted
    rotary: bool = True  # RoPE (GPT-2: learned positions, no rope keys)
    # Hugging Face tensors stored as (in, out) (GPT-2's Conv1D): llama.cpp keeps every matrix as (out, in)
    transposed: tuple[str, ...] = ()
    norm_offset: bool = False  # Gemma: RMSNorm gains stored as 1 + w (Hugging Face keeps w)
    # llama.cpp's fixed sliding-window pattern (Gemma 2: 2, Gemma 3: 6): layer i slides when i % n < n - 1; it
    # scales scores by 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim)
    swa_period: int = 0
    local_base: float | None = None  # the RoPE base of sliding layers llama.cpp fixes (Gemma 3: 10000)

    def metadata(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        """`<arch>.<key>` -> value for the keys config.json `hf` holds (unset head_dim: d_model / n_heads;
        GPT-2's unset n_inner: 4 d_model)."""
        if self.rotary:
            hf = {**hf, "rope_theta": rope_theta(hf),
                  "head_dim": hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]}
        else:
            hf = {**hf, "n_inner": hf.get("n_inner") or 4 * hf["n_embd"]}
        out = {f"{self.name}.{key}": (float32 if key in FLOAT_KEYS else int)(hf[name])
               for key, name in self.keys.items() if hf.get(name) is not None}
        if self.rotary:  # the rotated width: the whole head (a partial rotary is refused by the round trip)
            out[f"{self.name}.rope.dimension_count"] = out[f"{self.name}.attention.key_length"]
        return out

    def config(self, metadata: Mapping[str, Any], tied: bool) -> dict[str, Any]:
        """The config.json of a file with `metadata` (`tied`: it stores no output matrix)."""
        hf = {name: metadata[f"{self.name}.{key}"] for key, name in self.keys.items()
              if f"{self.name}.{key}" in metadata}
        out = {"model_type": self.family, **self.fixed, **hf, "tie_word_embeddings": tied}
        if self.rotary:
            theta = out.pop("rope_theta", 10000.0)
            out.update(rope_parameters={"rope_type": "default", "rope_theta": theta}, rope_theta=theta)
        if self.swa_period:
            n = self.swa_period
            out["layer_types"] = ["sliding_attention" if i % n < n - 1 else "full_attention"
                                  for i in range(out.get("num_hidden_layers", 0))]
            out["query_pre_attn_scalar"] = out.get("head_dim")
        if self.local_base is not None:
            out["rope_parameters"] = {"full_attention": out["rope_parameters"], "sliding_attention": {
                "rope_type": "default", "rope_theta": self.local_base}}
            del out["rope_theta"]
        return out

    def stored(self, name: str, t: torch.Tensor, reading: bool = False) -> torch.Tensor:
        """Hugging Face tensor `name` in llama.cpp's layout: matrices (out, in), Gemma's gains 1 + w
        (`reading`: the other way)."""
        if self.norm_offset and name.endswith("norm.weight"):
            return t - 1 if reading else t + 1
        return t.T if any(name.endswith(end) for end in self.transposed) else t


def float32(value: float) -> float:
    """`value` as GGUF stores it (a float32), in its shortest decimal form: 1e-6 stays 1e-6, while a value
    float32 cannot hold moves (and the export's round trip names it)."""
    return float(str(np.float32(value)))


def rope_theta(hf: Mapping[str, Any]) -> float | None:
    """The RoPE base of config.json `hf` (transformers 5 keeps it in rope_parameters)."""
    params = hf.get("rope_parameters") or {}
    params = params.get("full_attention", params)  # Gemma 3: per layer kind; GGUF's base is the global one
    return params.get("rope_theta", hf.get("rope_theta"))


ARCHS: dict[str, GGUFArch] = {  # Hugging Face model_type -> how it is written
    "llama": GGUFArch("llama", "llama", fixed={**PLAIN_DECODER, "attention_bias": False, "mlp_bias": False},
                      permute_qk=True),
    # llama.cpp writes Mistral as `llama` (no sliding window: a window no shorter than the context is none)
    "mistral": GGUFArch("llama", "llama", fixed={**PLAIN_DECODER, "attention_bias": False, "mlp_bias": False},
                        permute_qk=True),
    "qwen2": GGUFArch("qwen2", "qwen2", fixed={**PLAIN_DECODER, "use_sliding_window": False}),
    "qwen3": GGUFArch("qwen3", "qwen3", fixed={**PLAIN_DECODER, "use_sliding_window": False,
                                               "attention_bias": False}),
    # Phi-3: q/k/v fused in attn_qkv, gate and up in ffn_up (as its Hugging Face tensors); full rotary only
    "phi3": GGUFArch("phi3", "phi3", fixed={**PLAIN_DECODER, "sliding_window": None}),
    # GPT-2: learned positions, LayerNorm with biases, gelu_new; its Conv1D matrices transposed
    "gpt2": GGUFArch("gpt2", "gpt2", GPT2_KEYS, {"activation_function": "gelu_new", "resid_pdrop": 0.0,
                                                 "attn_pdrop": 0.0, "embd_pdrop": 0.0}, rotary=False,
                     transposed=(".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                                 ".mlp.c_proj.weight")),
    # Gemma 2 / 3: gains stored 1 + w, GELU-tanh gates, llama.cpp's fixed local / global layer pattern
    "gemma2": GGUFArch("gemma2", "gemma2", GEMMA2_KEYS, {**GEMMA, "hidden_act": "gelu_pytorch_tanh"},
                       norm_offset=True, swa_period=2),
    "gemma3_text": GGUFArch("gemma3", "gemma3_text", GEMMA_KEYS, {
        **GEMMA, "attn_logit_softcapping": None, "final_logit_softcapping": None}, norm_offset=True,
        swa_period=6, local_base=10000.0),
}
READS = {arch.name: arch for arch in ARCHS.values()}  # general.architecture -> the table it is read with


def arch_for(model_type: str) -> GGUFArch:
    """The table `model_type` is written with; ValueError naming the families GGUF export supports."""
    if model_type not in ARCHS:
        raise ValueError(f"GGUF export does not support the {model_type!r} family; supported: "
                         f"{', '.join(ARCHS)} (export as format=hf, or pick one with model_type=).")
    return ARCHS[model_type]


def arch_named(name: str, file: str) -> GGUFArch:
    """The table a file of general.architecture `name` is read with; ValueError naming the file."""
    if name not in READS:
        raise ValueError(f"{file}: zoo reads GGUF architectures {', '.join(READS)}, not {name!r}.")
    return READS[name]


def rotary_pairs(rows: torch.Tensor, n_heads: int) -> torch.Tensor:
    """q or k rows of each head from rotate-half order (x0..x(d/2-1), then their partners) to llama.cpp's
    interleaved pairs (x0, its partner, x1, ...)."""
    head = rows.shape[0] // n_heads
    return rows.reshape(n_heads, 2, head // 2, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)


def rotary_halves(rows: torch.Tensor, n_heads: int) -> torch.Tensor:
    """`rotary_pairs` undone: interleaved pairs back to rotate-half order."""
    head = rows.shape[0] // n_heads
    return rows.reshape(n_heads, head // 2, 2, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)
