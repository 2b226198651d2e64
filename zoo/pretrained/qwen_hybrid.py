"""The Qwen hybrids both ways: Qwen3.5 (`qwen3_5_text`, and the text part of `qwen3_5`), Qwen3.5-MoE
(`qwen3_5_moe_text`, the text part of `qwen3_5_moe`) and Qwen3-Next (`qwen3_next`). Qwen3's pre-norm decoder
where `layer_types` says which layers are `linear_attention` (Gated DeltaNet: zoo's `model.linear_mixer:
gated_deltanet`, layer tag `linear`) and which `full_attention` (tag `full`; by default every
`full_attention_interval`-th, 4). What differs from Qwen3:
- every RMSNorm (the layers', the final one, q/k per head) scales by (1 + weight), its weight stored
  zero-centred (zoo's `rmsnorm_1p`); the Gated DeltaNet's own gated norm keeps a plain weight;
- attention has an output gate (`model.mixer.output_gate`): `q_proj` holds [q_h | gate_h] per head, read and
  written by hand (`read_first`, `state_to_hf`);
- a partial RoPE (`partial_rotary_factor`, 0.25 by default) on the first quarter of each head, rotate-half;
- Qwen3.5's `rope_parameters` carry the vision model's `mrope_section` / `mrope_interleaved`: for text, the
  three position streams are one (transformers expands the text positions to all three), so they rotate as
  plain RoPE does and are not read;
- the linear layers' tensors are `linear_attn.*`: Qwen3.5 stores q/k/v, z, b and a apart (`in_proj_qkv`,
  ...), Qwen3-Next grouped per key head (`in_proj_qkvz`: [q_h | k_h | v_h.. | z_h..], `in_proj_ba`:
  [b_h.. | a_h..]).
Qwen3-Next's MoE is Qwen2-MoE's (qwen_moe.py: a gated shared expert, `mlp_only_layers`,
`decoder_sparse_step`); Qwen3.5-MoE's the same in every layer, always renormalised. Multi-token-prediction
tensors (`mtp.*`) and a vision-language folder's vision tower (`model.visual.*`) are passed over with a
warning; such a folder's model exports as its text model (`qwen3_5_text`, `qwen3_5_moe_text`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN_ROPE, Rope, pattern_of
from zoo.pretrained.decoder_heads import LLAMA_HEADS
from zoo.pretrained.family import Checks
from zoo.pretrained.io import HFConfig
from zoo.pretrained.llama import DECODER, KEYS, TENSORS, LlamaShaped
from zoo.pretrained.qwen_moe import EXPERTS, QwenExperts
from zoo.pretrained.tensor_map import HFTensors, Rows, stored_name, within

LINEAR = {  # a Qwen3.5 Gated DeltaNet layer: zoo -> HF (zoo.modules.gated_deltanet's names)
    "self_attn.qkv.weight": "linear_attn.in_proj_qkv.weight",
    "self_attn.z.weight": "linear_attn.in_proj_z.weight",
    "self_attn.b.weight": "linear_attn.in_proj_b.weight",
    "self_attn.a.weight": "linear_attn.in_proj_a.weight",
    "self_attn.conv.weight": "linear_attn.conv1d.weight", "self_attn.A_log": "linear_attn.A_log",
    "self_attn.dt_bias": "linear_attn.dt_bias", "self_attn.norm.weight": "linear_attn.norm.weight",
    "self_attn.o.weight": "linear_attn.out_proj.weight",
}
GROUPED = ("self_attn.qkv.weight", "self_attn.z.weight", "self_attn.b.weight", "self_attn.a.weight")
# the linear mixer's keys, named alike in config.json and model.linear_mixer, with transformers' defaults
LINEAR_KEYS = {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
               "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
KINDS = {"linear_attention": "linear", "full_attention": "full"}  # layer_types -> zoo's layer tag
MROPE = ("mrope_section", "mrope_interleaved")  # the vision model's rope keys: text rotates as plain RoPE
HYBRID = {**DECODER, "norm": "rmsnorm_1p", "mixer.qk_norm": True, "mixer.output_gate": True}


class QwenHybrid(LlamaShaped):
    """What the Qwen hybrids share: the key table, layer_types as the linear / full pattern, the gated q."""

    fixed = HYBRID
    defaults = {"head_dim": 256, "max_position_embeddings": 32768}
    requires = {"attention_bias": False}
    rope = Rope(PLAIN_ROPE, partial=("partial_rotary_factor", 0.25))
    linear_rows: Rows = LINEAR  # a linear layer's tensors (Qwen3-Next: grouped per key head, by hand)

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        params = hf.get("rope_parameters") or hf.get("rope_scaling")
        if isinstance(params, Mapping):  # text positions are one stream: the mrope sections change nothing
            hf = {**hf, "rope_parameters": {k: v for k, v in params.items() if k not in MROPE}}
        more, checks = super().more_from_hf(hf, settings)
        n = settings["n_layers"]
        interval = hf.get("full_attention_interval", 4)
        stepped = isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1
        given = hf.get("layer_types") or [
            "linear_attention" if stepped and (i + 1) % interval else "full_attention" for i in range(n)]
        known = len(given) == n and set(given) <= set(KINDS)
        checks["layer_types (linear_attention or full_attention, one per layer)"] = (known, True)
        checks["full_attention_interval (a positive integer)"] = (stepped, True)
        tags = [KINDS[kind] for kind in given] if known else ["full"] * n
        if "linear" in tags:
            linear = {f"linear_mixer.{k}": hf.get(k, v) for k, v in LINEAR_KEYS.items()}
            more.update({"linear_mixer": "gated_deltanet", **linear})
        return {**more, "layer_pattern": pattern_of(tags, "full")}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        linear = cfg.linear_mixer  # another linear mixer is written as the defaults: the round trip names it
        linear = linear if linear is not None and linear.name == "gated_deltanet" else None
        return {**super().more_to_hf(cfg),
                **{k: getattr(linear, k) if linear else v for k, v in LINEAR_KEYS.items()},
                "layer_types": ["linear_attention" if cfg.layer_is_linear(i) else "full_attention"
                                for i in range(cfg.n_layers)]}

    def tensor_map(self, cfg: ModelConfig) -> Rows:
        """The linear layers' rows by layer index, before the attention layers' (the first row that matches a
        name reads it)."""
        rows: dict = {}
        for i in filter(cfg.layer_is_linear, range(cfg.n_layers)):
            rows.update(within(f"decoder_stack.layers.{i}.", f"layers.{i}.", self.linear_rows))
        return {**rows, **self.tensors}

    def extra_tensors(self, names: Iterable[str]) -> dict[str, str]:
        return {name: "multi-token-prediction layers (mtp.*), which transformers does not build either"
                for name in names if name.startswith("mtp.")}

    # ----- attention's q_proj: [q_h | gate_h] per head -----
    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        out = super().read_first(src, cfg)
        h, d, c, kv = cfg.n_heads, cfg.head_size, cfg.d_model, cfg.kv_heads * cfg.head_size
        for i in range(cfg.n_layers):
            hf, zoo = f"layers.{i}.self_attn.", f"decoder_stack.layers.{i}.self_attn."
            if cfg.layer_is_linear(i):
                out.update(self.read_linear(src, cfg, f"layers.{i}.linear_attn.", zoo))
                continue
            q, gate = src.take(hf + "q_proj.weight", (2 * h * d, c)).view(h, 2 * d, c).split(d, dim=1)
            out[zoo + "qkv.weight"] = torch.cat([q.reshape(h * d, c), src.take(hf + "k_proj.weight", (kv, c)),
                                                 src.take(hf + "v_proj.weight", (kv, c))])
            out[zoo + "gate.weight"] = gate.reshape(h * d, c)
        return out

    def read_linear(self, src: HFTensors, cfg: ModelConfig, hf: str, zoo: str) -> dict[str, torch.Tensor]:
        """A linear layer's tensors the rows cannot read (none: Qwen3.5 stores them apart)."""
        return {}

    def state_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        linear = [i for i in range(cfg.n_layers) if cfg.layer_is_linear(i)]
        by_hand = {f"decoder_stack.layers.{i}.{name}" for i in linear for name in GROUPED} \
            if self.linear_rows is not LINEAR else set()  # written by write_linear, not by the rows
        out = super().state_to_hf({k: v for k, v in state.items() if k not in by_hand}, cfg)
        prefix, h, d = self.base_prefix(cfg), cfg.n_heads, cfg.head_size
        for i in range(cfg.n_layers):
            zoo = f"decoder_stack.layers.{i}.self_attn."
            if i in linear:
                hf = stored_name(f"layers.{i}.linear_attn.", prefix)
                out.update(self.write_linear(state, cfg, hf, zoo))
                continue
            q = state[zoo + "qkv.weight"][: h * d]
            gate = state[zoo + "gate.weight"]
            out[stored_name(f"layers.{i}.self_attn.q_proj.weight", prefix)] = torch.cat(
                [q.view(h, d, -1), gate.view(h, d, -1)], dim=1).reshape(2 * h * d, -1)
        return out

    def write_linear(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, hf: str, zoo: str
                     ) -> dict[str, torch.Tensor]:
        """A linear layer's tensors the rows cannot write."""
        return {}


class Qwen35Text(QwenHybrid):
    """Qwen3.5's text model (Qwen3_5ForCausalLM, Qwen3_5TextModel, Qwen3_5TextForSequenceClassification)."""

    model_type = "qwen3_5_text"
    class_prefix = "Qwen3_5"
    heads = {head: LLAMA_HEADS[head] for head in ("none", "lm", "classifier")}
    not_loaded = {"Qwen3_5ForTokenClassification": "it is built from the vision-language Qwen3_5Config"}
    defaults = {**QwenHybrid.defaults, "vocab_size": 248320}

    def classes(self) -> dict[str, str]:
        return {"Qwen3_5ForCausalLM": "lm", "Qwen3_5TextModel": "none",
                "Qwen3_5TextForSequenceClassification": "classifier"}


class TextOfVisionLanguage:
    """A vision-language folder read as the text model it holds: its `text_config` (with the keys the whole
    model keeps on top: the class, the tie, which transformers follows) and the text model's tensors
    (`model.language_model.*`, `lm_head`); the vision tower is passed over. Exported as that text model
    (`text_family`), which transformers loads. Mixed in before the text family."""

    text_family: type = QwenHybrid
    prefixes = ("model.language_model.",)
    not_loaded: Mapping[str, str] = {}

    def text_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        text = hf["text_config"]
        if not isinstance(text, Mapping):
            raise ValueError(f"{self.model_type} config.json's text_config must be a mapping of the text "
                             f"model's keys; got {type(text).__name__}.")
        top = {k: hf[k] for k in ("architectures", "tie_word_embeddings") if k in hf}
        merged = {**text, **top, "model_type": self.model_type}
        return HFConfig(merged, hf.file) if isinstance(hf, HFConfig) else merged

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        return super().config_from_hf(self.text_config(hf) if "text_config" in hf else hf)

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return self.text_family().config_to_hf(cfg)

    def read_back(self, hf: dict[str, Any], cfg: ModelConfig) -> ModelConfig:
        return self.text_family().read_back(hf, cfg)

    def class_for(self, head: str) -> str:
        return self.text_family().class_for(head)

    def base_prefix(self, cfg: ModelConfig) -> str:
        return self.text_family().base_prefix(cfg)

    def extra_tensors(self, names: Iterable[str]) -> dict[str, str]:
        names = list(names)
        return {**super().extra_tensors(names),
                **{name: "the vision tower (model.visual.*): zoo reads the text model"
                   for name in names if name.startswith("model.visual.")}}


class Qwen35(TextOfVisionLanguage, Qwen35Text):
    """The vision-language `qwen3_5` folder (Qwen3_5ForConditionalGeneration), exported as `qwen3_5_text`."""

    model_type = "qwen3_5"
    text_family = Qwen35Text

    def classes(self) -> dict[str, str]:
        return {"Qwen3_5ForConditionalGeneration": "lm"}


class Qwen3Next(QwenExperts, QwenHybrid):
    """Qwen3-Next: the hybrid with Qwen2-MoE's experts and gated shared expert; its linear layers' projections
    grouped per key head."""

    model_type = "qwen3_next"
    class_prefix = "Qwen3Next"
    shared = True
    heads = LLAMA_HEADS  # Qwen3NextForQuestionAnswering keeps its base under `transformer.`
    fixed = {**HYBRID, "ffn": "moe"}
    defaults = {**QwenHybrid.defaults, "vocab_size": 151936}
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", EXPERTS)}
    linear_rows = {k: v for k, v in LINEAR.items() if k not in GROUPED}
    moe_defaults = {"num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
                    "shared_expert_intermediate_size": 512, "norm_topk_prob": True}  # Qwen3NextConfig's

    def moe_from_hf(self, hf: Mapping[str, Any], n_layers: int) -> tuple[dict[str, Any], list[str], Checks]:
        return super().moe_from_hf({**self.moe_defaults, **hf}, n_layers)

    def linear_sizes(self, cfg: ModelConfig) -> tuple[int, int, int, int]:
        s = cfg.linear_mixer
        return (s.linear_num_key_heads, s.linear_num_value_heads // s.linear_num_key_heads,
                s.linear_key_head_dim, s.linear_value_head_dim)

    def read_linear(self, src: HFTensors, cfg: ModelConfig, hf: str, zoo: str) -> dict[str, torch.Tensor]:
        """[q_h | k_h | v_h.. | z_h..] and [b_h.. | a_h..] per key head h -> zoo's [q | k | v], z, b, a."""
        hk, r, dk, dv = self.linear_sizes(cfg)
        c = cfg.d_model
        qkvz = src.take(hf + "in_proj_qkvz.weight", (hk * (2 * dk + 2 * r * dv), c)).view(hk, -1, c)
        q, k, v, z = qkvz.split([dk, dk, r * dv, r * dv], dim=1)
        b, a = src.take(hf + "in_proj_ba.weight", (hk * 2 * r, c)).view(hk, 2 * r, c).split(r, dim=1)
        flat = lambda t: t.reshape(-1, c)  # noqa: E731
        return {zoo + "qkv.weight": torch.cat([flat(q), flat(k), flat(v)]), zoo + "z.weight": flat(z),
                zoo + "b.weight": flat(b), zoo + "a.weight": flat(a)}

    def write_linear(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, hf: str, zoo: str
                     ) -> dict[str, torch.Tensor]:
        hk, r, dk, dv = self.linear_sizes(cfg)
        c = cfg.d_model
        q, k, v = state[zoo + "qkv.weight"].split([hk * dk, hk * dk, hk * r * dv])
        heads = lambda t: t.reshape(hk, -1, c)  # noqa: E731
        qkvz = torch.cat([heads(q), heads(k), heads(v), heads(state[zoo + "z.weight"])], dim=1)
        ba = torch.cat([heads(state[zoo + "b.weight"]), heads(state[zoo + "a.weight"])], dim=1)
        return {hf + "in_proj_qkvz.weight": qkvz.reshape(-1, c), hf + "in_proj_ba.weight": ba.reshape(-1, c)}


class Qwen35MoeText(QwenExperts, QwenHybrid):
    """Qwen3.5's MoE text model (Qwen3_5MoeForCausalLM, Qwen3_5MoeTextModel): Qwen3.5's layers (linear
    projections apart) with Qwen3-Next's experts in every layer. transformers' Qwen3_5MoeTextConfig has no
    norm_topk_prob, decoder_sparse_step, mlp_only_layers or intermediate_size: every layer is MoE and the
    kept weights are always renormalised, whatever a config.json says of them."""

    model_type = "qwen3_5_moe_text"
    shared = True
    heads = {head: LLAMA_HEADS[head] for head in ("none", "lm")}
    keys = tuple(k for k in KEYS if k.zoo != "d_ff")  # no dense MLP: intermediate_size is not a key of it
    fixed = {**HYBRID, "ffn": "moe"}
    defaults = {**QwenHybrid.defaults, "vocab_size": 248320}
    tensors = Qwen3Next.tensors
    moe_defaults = {"num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
                    "shared_expert_intermediate_size": 512}  # Qwen3_5MoeTextConfig's
    # keys transformers' config lacks, at what its model does whatever they say
    IGNORED = {"norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []}

    def classes(self) -> dict[str, str]:
        return {"Qwen3_5MoeForCausalLM": "lm", "Qwen3_5MoeTextModel": "none"}

    def moe_from_hf(self, hf: Mapping[str, Any], n_layers: int) -> tuple[dict[str, Any], list[str], Checks]:
        return super().moe_from_hf({**self.moe_defaults, **hf, **self.IGNORED}, n_layers)

    def moe_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """Without the keys transformers' config lacks (a router or dense layer they would say: the round trip
        names it)."""
        return {k: v for k, v in super().moe_to_hf(cfg).items() if k not in self.IGNORED}


class Qwen35Moe(TextOfVisionLanguage, Qwen35MoeText):
    """The vision-language `qwen3_5_moe` folder (Qwen3_5MoeForConditionalGeneration), exported as
    `qwen3_5_moe_text`."""

    model_type = "qwen3_5_moe"
    text_family = Qwen35MoeText

    def classes(self) -> dict[str, str]:
        return {"Qwen3_5MoeForConditionalGeneration": "lm"}
