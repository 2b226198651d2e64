"""ModernBERT (Warner et al., 2024): a pre-norm encoder with RoPE, a GeGLU MLP and no biases (its LayerNorms
have none either: zoo's `bias`), a final norm, and no norm before layer 0's attention, where the embedding
LayerNorm does that job (`first_attn_norm: false`). Layers 0, k, 2k, ... attend globally and the rest within
a window: `layer_types` (4.x: `global_attn_every_n_layers`, 3) -> zoo's `model.layer_pattern` (`[global,
local, local]`); HF's `local_attention` (128) is the whole window, a query seeing keys at |i - j| <=
local_attention // 2, which is zoo's bidirectional `model.mixer.sliding_window`. Each kind has its RoPE base:
the global layers' (160000) is `model.positional.base`, the local ones' (10000) `model.positional.local_base`;
both unscaled. The masked-LM head is dense (bias:
`classifier_bias`), `classifier_activation`, LayerNorm, then the decoder tied to the token table, whose own
bias (`decoder_bias`) is zoo's `model.head.bias`. The sequence-classification, token-classification and QA
classes run that same dense + activation + LayerNorm (`head`) before their `classifier`: zoo's
`model.head.dense`, on the vector pooled by `classifier_pooling` (cls: the first position, mean: the mean of
the real tokens; zoo's `model.head.pool` first | mean) or at every position. The multiple-choice class is
refused (zoo has no such head)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.feedforward import ACTIVATIONS
from zoo.pretrained.bert import MaskedLMLayout
from zoo.pretrained.config_map import PLAIN, PLAIN_ROPE, Key, Rope
from zoo.pretrained.family import Checks, Family
from zoo.pretrained.gemma import GLOBAL, LOCAL, LayerTypeRope, layer_types, read_layer_types
from zoo.pretrained.heads import HeadLayout, num_labels
from zoo.pretrained.llama import GATED
from zoo.pretrained.tensor_map import HFTensors, load, save, stored_name, within


@dataclass(frozen=True)
class DecoderBiasLayout(MaskedLMLayout):
    """BERT's masked-LM layout, except that the vocabulary bias is only the decoder's own (`decoder.bias`,
    absent with decoder_bias=false)."""

    def origins(self) -> dict[str, str]:
        return {**super().origins(), "head.proj.bias": f"{self.decoder}.bias"}

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor],
                shapes: Mapping[str, tuple[int, ...]]) -> None:
        rows = {k: h for k, h in self.origins().items() if k != "head.proj.weight"}
        out.update(load(rows, src, shapes, cfg))
        if cfg.tie_embeddings:
            src.discard(f"{self.decoder}.weight")
            out["head.proj.weight"] = out["embed.tokens.weight"]
        else:
            out["head.proj.weight"] = src.take(f"{self.decoder}.weight", (cfg.vocab_size, cfg.d_model))

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str
              ) -> dict[str, torch.Tensor]:
        out = save({k: h for k, h in self.origins().items() if k != "head.proj.weight"}, state, cfg, prefix)
        if not cfg.tie_embeddings:
            out[stored_name(f"{self.decoder}.weight", prefix)] = state["head.proj.weight"]
        return out


LAYER = {"norm_self.{p}": "attn_norm.{p}", "self_attn.qkv.{p}": "attn.Wqkv.{p}",
         "self_attn.o.{p}": "attn.Wo.{p}", "norm_ffn.{p}": "mlp_norm.{p}", "ffn.up.{p}": "mlp.Wi.{p}",
         "ffn.down.{p}": "mlp.Wo.{p}"}
SAME_BIAS = ("mlp_bias", "norm_bias", "classifier_bias")  # zoo's one `bias` is attention_bias too
SPELLED = {zoo: hf for hf, zoo in reversed(list(PLAIN.items()))}  # zoo activation -> its first HF name
POOLING = {"cls": None, "mean": "mean"}  # classifier_pooling -> model.head.pool (None: an encoder's first)
POOLED_AS = {None: "cls", "first": "cls", "mean": "mean"}  # model.head.pool -> classifier_pooling


@dataclass(frozen=True)
class DenseHeadLayout(HeadLayout):
    """A classifier class of ModernBERT: `head.dense` (bias: classifier_bias), classifier_activation,
    `head.norm`, dropout, then `classifier`; the sequence classifier first pools by classifier_pooling."""

    def config(self, hf: Mapping[str, Any], family: Any) -> dict[str, Any]:
        return {**super().config(hf, family), **self.head_keys({
            "dense": True, "activation": PLAIN.get(hf.get("classifier_activation", "gelu")),
            "pool": POOLING.get(hf.get("classifier_pooling", "cls"))})}

    def origins(self) -> dict[str, str]:
        parts = (("transform", "dense"), ("transform_norm", "norm"))
        dense = {f"head.{z}.{p}": f"~head.{h}.{p}" for z, h in parts for p in ("weight", "bias")}
        return {**dense, **super().origins()}


def plain_activation_name(name: str) -> str:
    """The ungated form of activation `name` (geglu -> gelu), as the LM head's transform applies it."""
    return ACTIVATIONS.get(name).plain or name


class ModernBert(Family):
    model_type = "modernbert"
    class_prefix = "ModernBert"
    lm_suffixes = ("ForMaskedLM",)
    prefixes = ("model.",)
    heads = {"none": HeadLayout("none", bare=True),
             "lm": DecoderBiasLayout("lm", dense="~head.dense", norm="~head.norm", decoder="~decoder"),
             "classifier": DenseHeadLayout("classifier", proj="~classifier", labelled=True),
             "token_classifier": DenseHeadLayout("token_classifier", proj="~classifier", labelled=True),
             "qa": DenseHeadLayout("qa", proj="~classifier")}
    not_loaded = {"ModernBertForMultipleChoice": "zoo has no multiple-choice head"}
    tensors = {"embed.tokens.weight": "embeddings.tok_embeddings.weight",
               "embed.norm.{p}": "embeddings.norm.{p}",
               "encoder_stack.final_norm.{p}": "final_norm.{p}",
               **within("encoder_stack.layers.{i}.", "layers.{i}.", LAYER)}
    keys = (
        Key("vocab_size", "vocab_size"), Key("d_model", "hidden_size"), Key("n_layers", "num_hidden_layers"),
        Key("n_heads", "num_attention_heads"), Key("d_ff", "intermediate_size"),
        Key("activation", "hidden_activation", "gelu", GATED),
        Key("norm_eps", "norm_eps", 1e-5), Key("max_seq_len", "max_position_embeddings", 8192),
        Key("bias", "attention_bias", False), Key("dropout", "embedding_dropout", 0.0),
        Key("attn_dropout", "attention_dropout", 0.0),
        Key("pad_id", "pad_token_id", 0, token=True), Key("bos_id", "bos_token_id", 1, token=True),
        Key("eos_id", "eos_token_id", 2, token=True),
    )
    fixed = {"arch": "encoder", "norm": "layernorm", "norm_placement": "pre", "embed_norm": True,
             "first_attn_norm": False, "positional": "rope", "positional.layout": "half"}
    rope = LayerTypeRope(Rope(PLAIN_ROPE, base="global_rope_theta"),
                         Rope(PLAIN_ROPE, base="local_rope_theta"), full_default=160000.0,
                         sliding_default=10000.0)

    def lm_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        """The masked-LM head's keys (a bare model has none of them)."""
        return {"head.transform": True, "head.bias": hf.get("decoder_bias", True),
                "head.activation": PLAIN.get(hf.get("classifier_activation", "gelu")),
                "tie_embeddings": hf.get("tie_word_embeddings", True)}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        rope, checks = self.rope.from_hf(hf)
        head = self.layout(hf).head
        if head != "none":
            checks["classifier_activation"] = (hf.get("classifier_activation", "gelu"), tuple(PLAIN))
        if head == "classifier":
            checks["classifier_pooling"] = (hf.get("classifier_pooling", "cls"), tuple(POOLING))
        if head == "qa":
            checks["num_labels == 2 (start, end)"] = (num_labels(hf) == 2, True)
        n, every_n = settings["n_layers"], hf.get("global_attn_every_n_layers", 3)
        types = hf.get("layer_types") or [LOCAL if i % every_n else GLOBAL for i in range(n)]
        local = hf.get("local_attention", 128)  # null or text would fail below as a TypeError
        whole = isinstance(local, int) and not isinstance(local, bool) and local >= 2
        window, window_checks = read_layer_types(types, n, local // 2 if whole else None)
        if not whole:  # named once, as itself, not again as a missing window
            window_checks = {"local_attention": (local, "an integer >= 2")}
        checks.update({f"{key} == attention_bias": (hf.get(key, False) == settings["bias"], True)
                       for key in SAME_BIAS})
        checks.update({
            **window_checks,
            "hidden_size a multiple of num_attention_heads": (settings["d_model"] % settings["n_heads"] == 0,
                                                              True),
        })
        same_base = rope["positional.local_base"] == rope["positional.base"]
        windowed = window["mixer.sliding_window"] is not None
        return {**rope, "positional.local_base": None if same_base or not windowed
                else rope["positional.local_base"], **window}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        window, types = cfg.mixer.sliding_window, layer_types(cfg)
        head_activation = getattr(cfg.head, "activation", None) or plain_activation_name(cfg.activation)
        rope = self.rope.to_hf(cfg)["rope_parameters"]
        # transformers 4.x reads only global_attn_every_n_layers (global layers 0, k, 2k, ...) and the thetas
        every = next((k for k in range(1, len(types) + 1)
                      if types == [LOCAL if i % k else GLOBAL for i in range(len(types))]), None)
        return {"rope_parameters": rope, "global_rope_theta": rope[GLOBAL]["rope_theta"],
                "local_rope_theta": rope[LOCAL]["rope_theta"], "layer_types": types,
                "local_attention": 128 if window is None else 2 * window,
                **({} if every is None else {"global_attn_every_n_layers": every}),
                **{key: cfg.bias for key in SAME_BIAS}, "mlp_dropout": cfg.dropout,
                "decoder_bias": getattr(cfg.head, "bias", False), "tie_word_embeddings": cfg.tie_embeddings,
                "classifier_activation": SPELLED.get(head_activation, "gelu"),
                "classifier_pooling": POOLED_AS.get(getattr(cfg.head, "pool", None), "cls"),
                "classifier_dropout": cfg.dropout}
