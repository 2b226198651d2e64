"""DeepSeek-V3 (and Kimi K2, whose checkpoints are `deepseek_v3`) both ways: Llama's decoder with Multi-head
Latent Attention (model.mixer=mla: `q_lora_rank`, `kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`,
`v_head_dim`; `rope_interleave` as model.positional.layout, YaRN's `mscale` / `mscale_all_dim` read) and a
Mixture of Experts after the first `first_k_dense_replace` dense layers (model.layer_pattern
{prefix: [dense] * k, cycle: [moe]}). The router `mlp.gate` is zoo's `sigmoid_bias` (sigmoid scores plus the
`e_score_correction_bias` buffer to choose, n_group / topk_group groups, norm_topk_prob), its weights times
`routed_scaling_factor` (route_scale); `n_shared_experts` always-on experts of width `moe_intermediate_size`
each are one FFN `mlp.shared_experts`. transformers keeps no balancing loss: balance is {}. Multi-token
prediction layers (`num_nextn_predict_layers`, stored after the last layer as `model.layers.<n_layers + k>.*`:
a layer plus enorm, hnorm, eh_proj, shared_head.norm and copies of the token table and head), which
transformers does not build, load as model.mtp (zoo.modules.mtp) when the file holds them; `mtp=None`
(from_pretrained's override) leaves them out with a warning. transformers writes num_nextn_predict_layers 1
into every V3 folder, with or without the layer: the weights decide (`fit_stored`).
The other latent-attention families are these tables with what differs: DeepSeek-V2 (softmax routing),
GLM-4.7-Flash (`glm4_moe_lite`: the MoE layers listed in `mlp_layer_types`) and Youtu-LLM (dense)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.config_map import Key, moe_paths, pattern_of
from zoo.pretrained.decoder_heads import LLAMA_HEADS
from zoo.pretrained.family import Checks
from zoo.pretrained.heads import HeadLayout
from zoo.pretrained.llama import DECODER, GATED, LAYER, TENSORS, LlamaShaped
from zoo.pretrained.tensor_map import HFTensors, Rows, stored_name, within

ATTENTION = {  # zoo -> HF inside a layer (zoo.modules.mla's names)
    "self_attn.q.{p}": "self_attn.q_proj.{p}", "self_attn.q_a.{p}": "self_attn.q_a_proj.{p}",
    "self_attn.q_norm.weight": "self_attn.q_a_layernorm.weight",
    "self_attn.q_b.{p}": "self_attn.q_b_proj.{p}",
    "self_attn.kv_a.{p}": "self_attn.kv_a_proj_with_mqa.{p}",
    "self_attn.kv_norm.weight": "self_attn.kv_a_layernorm.weight",
    "self_attn.kv_b.{p}": "self_attn.kv_b_proj.{p}", "self_attn.o.{p}": "self_attn.o_proj.{p}",
}
EXPERTS = {  # zoo -> HF inside a layer
    "ffn.router.proj.weight": "mlp.gate.weight", "ffn.router.bias": "mlp.gate.e_score_correction_bias",
    "ffn.experts.{e}.up.weight": ("mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight"),
    "ffn.experts.{e}.down.weight": "mlp.experts.{e}.down_proj.weight",
    "ffn.shared.up.weight": ("mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight"),
    "ffn.shared.down.weight": "mlp.shared_experts.down_proj.weight",
}
KEYS = (  # Llama's, less the key / value heads and head_dim (MLA's sizes are its own keys)
    Key("vocab_size", "vocab_size"), Key("d_model", "hidden_size"), Key("n_layers", "num_hidden_layers"),
    Key("n_heads", "num_attention_heads"), Key("d_ff", "intermediate_size"),
    Key("activation", "hidden_act", "silu", GATED),
    Key("norm_eps", "rms_norm_eps", 1e-6), Key("max_seq_len", "max_position_embeddings", 4096),
    Key("attn_dropout", "attention_dropout", 0.0), Key("tie_embeddings", "tie_word_embeddings", False),
    Key("pad_id", "pad_token_id", 0, token=True), Key("bos_id", "bos_token_id", 0, token=True),
    Key("eos_id", "eos_token_id", 1, token=True),
    Key("mixer.q_lora_rank", "q_lora_rank", 1536), Key("mixer.kv_lora_rank", "kv_lora_rank", 512),
    Key("mixer.qk_nope_head_dim", "qk_nope_head_dim", 128),
    Key("mixer.qk_rope_head_dim", "qk_rope_head_dim", 64),
    Key("mixer.v_head_dim", "v_head_dim", 128), Key("mixer.bias", "attention_bias", False),
)
_MTP = re.compile(r"(?:^|\.)layers\.(\d+)\.eh_proj\.weight$")  # a multi-token-prediction layer's own tensor
MTP_OWN = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight", "eh_proj.weight": "eh_proj.weight",
           "norm.weight": "shared_head.norm.weight"}  # zoo.modules.mtp -> HF inside an MTP layer
MTP_COPIES = ("embed_tokens.weight", "shared_head.head.weight")  # the model's token table and head, again
LATENT_NORM_EPS = 1e-6  # transformers' q_a_layernorm / kv_a_layernorm: RMSNorm's default, not rms_norm_eps
LAYOUTS = {True: "interleaved", False: "half"}  # rope_interleave -> model.positional.layout


def heads_of(*names: str) -> dict[str, HeadLayout]:
    """The Llama-shaped head layouts of the classes a family has."""
    return {name: LLAMA_HEADS[name] for name in names}


class LatentDecoder(LlamaShaped):
    """Llama's decoder with latent attention (the MLA keys, tensors and rope layout every family here has)."""

    keys = KEYS
    fixed = {**DECODER, "mixer": "mla", "mixer.latent_norm_eps": LATENT_NORM_EPS}
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", ATTENTION)}
    reads_layout = True  # config.json says the rope layout (rope_interleave); else interleaved

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        rope, checks = self.rope.from_hf(hf)
        interleave = hf.get("rope_interleave", True) if self.reads_layout else True
        checks["rope_interleave"] = (interleave, tuple(LAYOUTS))
        return {**rope, "positional.layout": LAYOUTS.get(interleave, "interleaved")}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        layout = {"rope_interleave": cfg.positional.layout == "interleaved"} if self.reads_layout else {}
        return {**self.rope.to_hf(cfg), **layout, "num_key_value_heads": cfg.n_heads}


class Youtu(LatentDecoder):
    """Youtu-LLM: a dense latent-attention decoder, its head tied to the token table by default."""

    model_type = "youtu"
    class_prefix = "Youtu"
    heads = heads_of("none", "lm")
    defaults = {"tie_word_embeddings": True, "bos_token_id": 128000, "eos_token_id": 128001,
                "max_position_embeddings": 131072}


class DeepseekV3(LatentDecoder):
    model_type = "deepseek_v3"
    class_prefix = "DeepseekV3"
    heads = heads_of("none", "lm", "classifier", "token_classifier")
    fixed = {**LatentDecoder.fixed, "ffn": "moe"}
    # the Hub's config.json names V3's routing, which transformers computes whatever they say
    requires = {"topk_method": "noaux_tc", "scoring_func": "sigmoid", "moe_layer_freq": 1}
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", {**ATTENTION, **EXPERTS})}
    moe_defaults = {"n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
                    "moe_intermediate_size": 2048, "routed_scaling_factor": 2.5}  # the config class's

    def extra_tensors(self, names: Iterable[str]) -> dict[str, str]:
        """The multi-token-prediction layers: a layer whose tensors include `eh_proj` (numbered after the
        last): not counted as layers of the stack; left over (passed over with a warning) when model.mtp is
        null."""
        names = list(names)
        marked = _mtp_layers(names)
        pattern = re.compile(rf"(?:^|\.)layers\.({'|'.join(map(str, marked))})\.") if marked else None
        why = ("a multi-token-prediction layer (num_nextn_predict_layers), left out: model.mtp is null (it "
               "loads as model.mtp when config.json counts it, unless from_pretrained(..., mtp=None))")
        return {name: why
                for name in names if pattern and pattern.search(name)}

    def fit_stored(self, cfg: ModelConfig, names: Iterable[str], given: Iterable[str] = ()) -> ModelConfig:
        """model.mtp as the file holds it: none without MTP layers (transformers' own folders say
        num_nextn_predict_layers 1 regardless) or without the LM head they share (then they are left out with
        a warning, as when config.json counts none); a count config.json gives must be the file's, right
        after the last layer."""
        layers = _mtp_layers(names)
        if cfg.mtp is None or "mtp" in given:  # the caller's model.mtp is the caller's
            return cfg
        if not layers or cfg.head.name != "lm":
            return dataclasses.replace(cfg, mtp=None)
        if layers != list(range(cfg.n_layers, cfg.n_layers + cfg.mtp.depth)):
            raise ValueError(f"config.json num_nextn_predict_layers={cfg.mtp.depth} (model.mtp.depth) "
                             f"disagrees with the weights: they hold multi-token-prediction layers {layers} "
                             f"after layers 0-{cfg.n_layers - 1}. Fix config.json, or use the weights it was "
                             "saved with.")
        names = list(names)
        for i in layers:  # zoo builds MTP layer i as model.layer_pattern tiles to index i
            stored = any(f"layers.{i}.mlp.experts." in name for name in names)
            if stored != cfg.layer_is_moe(i):
                kinds = {True: "a Mixture of Experts", False: "a dense FFN"}
                raise ValueError(f"The multi-token-prediction layer {i} holds {kinds[stored]}, but "
                                 f"model.layer_pattern={cfg.layer_pattern.to_data()} tiled to layer {i} "
                                 f"makes it {kinds[not stored]}; load without it: from_pretrained(..., "
                                 "mtp=None).")
        return cfg

    def tensor_map(self, cfg: ModelConfig) -> Rows:
        """The family's rows and each multi-token-prediction module's: zoo's `mtp.layers.<k>` is the file's
        layer n_layers + k."""
        if cfg.mtp is None:
            return self.tensors
        rows = dict(self.tensors)
        for k in range(cfg.mtp.depth):
            hf = f"layers.{cfg.n_layers + k}."
            rows.update(within(f"mtp.layers.{k}.", hf, MTP_OWN))
            rows.update(within(f"mtp.layers.{k}.block.", hf, {**LAYER, **ATTENTION, **EXPERTS}))
        return rows

    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """Each MTP layer's copies of the token table and head (MTP_COPIES) are read and must equal the
        model's own, which zoo's modules share (DeepSeek-V3 trains them shared)."""
        out = super().read_first(src, cfg)
        if cfg.mtp is None:
            return out
        shape = (cfg.vocab_size, cfg.d_model)
        table = out.get("embed.tokens.weight")
        table = src.take("embed_tokens.weight", shape) if table is None else table
        head = table if cfg.tie_embeddings else src.take_optional("~lm_head.weight", shape)
        for k in range(cfg.mtp.depth):
            for name, own in zip(MTP_COPIES, (table, head), strict=True):
                name = f"layers.{cfg.n_layers + k}.{name}"
                copy = src.take_optional(name, shape)
                if copy is not None and own is not None and not torch.equal(copy, own):
                    raise ValueError(f"{src.key(name)} in {src.source} differs from the model's own "
                                     f"{'token table' if name.endswith('embed_tokens.weight') else 'head'}; "
                                     "zoo's multi-token-prediction modules share them (as DeepSeek-V3 trains "
                                     "them). Load without them: from_pretrained(..., mtp=None).")
        return out

    def state_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """The family's tensors, and each MTP layer's copies of the token table and head, as the Hub's files
        store them."""
        out = super().state_to_hf(state, cfg)
        if cfg.mtp is None:
            return out
        table = state["embed.tokens.weight"]
        copies = (table, state.get("head.proj.weight", table))
        prefix = self.base_prefix(cfg)
        for k in range(cfg.mtp.depth):
            for name, tensor in zip(MTP_COPIES, copies, strict=True):
                out[stored_name(f"layers.{cfg.n_layers + k}.{name}", prefix)] = tensor
        return out

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)
        given = {key: hf.get(key, default) for key, default in self.moe_defaults.items()}
        router, router_checks = self.router_from_hf(hf)
        moe = {"n_experts": given["n_routed_experts"], "top_k": given["num_experts_per_tok"],
               "n_shared_experts": given["n_shared_experts"], "expert_d_ff": given["moe_intermediate_size"],
               "route_scale": float(given["routed_scaling_factor"]), "balance": {}, "router": router}
        layers, layer_checks = self.moe_layers(hf, settings["n_layers"])
        depth = hf.get("num_nextn_predict_layers") or 0
        known = isinstance(depth, int) and not isinstance(depth, bool) and 0 <= depth <= 16
        mtp = {"mtp": {"name": "sequential", "depth": depth}} if known and depth else {}
        return ({**more, **moe_paths(moe), "layer_pattern": pattern_of(layers, "moe"), **mtp},
                {**checks, **router_checks, **layer_checks,
                 "num_nextn_predict_layers (an integer in [0, 16])": (known, True)})

    def moe_layers(self, hf: Mapping[str, Any], n_layers: int) -> tuple[list[str], Checks]:
        """What each layer's FFN is ("dense" or "moe"), and the checks."""
        dense = hf.get("first_k_dense_replace") or 0
        return ["dense" if i < dense else "moe" for i in range(n_layers)], {}

    def moe_layers_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """config.json's keys saying which layers are MoE (a pattern they cannot say: the round trip names
        it)."""
        dense = next((i for i in range(cfg.n_layers) if cfg.layer_is_moe(i)), cfg.n_layers)
        return {"first_k_dense_replace": dense}

    def router_from_hf(self, hf: Mapping[str, Any]) -> tuple[dict[str, Any], Checks]:
        """model.ffn.router from config.json, and the checks."""
        groups = {"n_group": hf.get("n_group") or 1, "topk_group": hf.get("topk_group") or 1}
        return {"name": "sigmoid_bias", **groups,
                "norm_topk_prob": bool(hf.get("norm_topk_prob", True))}, {}

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        moe, router = cfg.ffn, cfg.ffn.router
        return {**super().more_to_hf(cfg), "n_routed_experts": moe.n_experts,
                "num_experts_per_tok": moe.top_k, "n_shared_experts": moe.n_shared_experts,
                "moe_intermediate_size": moe.expert_d_ff or cfg.ffn_dim,
                "routed_scaling_factor": moe.route_scale,
                "n_group": getattr(router, "n_group", 1), "topk_group": getattr(router, "topk_group", 1),
                **self.router_to_hf(cfg), **self.moe_layers_to_hf(cfg),
                "num_nextn_predict_layers": 0 if cfg.mtp is None else cfg.mtp.depth}

    def router_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """config.json's routing keys (another router than the family's: the round trip names it)."""
        return {"norm_topk_prob": getattr(cfg.ffn.router, "norm_topk_prob", True)}


class Glm4MoeLite(DeepseekV3):
    """GLM-4.7-Flash: V3's tables with the MoE layers listed per layer (`mlp_layer_types`: dense or sparse;
    default: the first dense)."""

    model_type = "glm4_moe_lite"
    class_prefix = "Glm4MoeLite"
    heads = heads_of("none", "lm")
    requires = {}
    defaults = {"rms_norm_eps": 1e-5, "max_position_embeddings": 202752, "q_lora_rank": 768,
                "qk_nope_head_dim": 192, "v_head_dim": 256}
    moe_defaults = {"n_routed_experts": 64, "num_experts_per_tok": 4, "n_shared_experts": 1,
                    "moe_intermediate_size": 1536, "routed_scaling_factor": 1.8}
    KINDS = {"dense": "dense", "sparse": "moe"}  # mlp_layer_types -> zoo's layer tag

    def moe_layers(self, hf: Mapping[str, Any], n_layers: int) -> tuple[list[str], Checks]:
        given = hf.get("mlp_layer_types") or ["dense"] + ["sparse"] * (n_layers - 1)
        known = len(given) == n_layers and set(given) <= set(self.KINDS)
        layers = [self.KINDS[kind] for kind in given] if known else ["moe"] * n_layers
        return layers, {"mlp_layer_types (dense or sparse, one per layer)": (known, True)}

    def moe_layers_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {"mlp_layer_types": ["sparse" if cfg.layer_is_moe(i) else "dense"
                                    for i in range(cfg.n_layers)]}


class DeepseekV2(DeepseekV3):
    """DeepSeek-V2 (and V2-Lite): V3's tables with softmax routing, `topk_method` greedy (zoo's softmax_topk)
    or group_limited_greedy (groups scored by their best expert), no correction bias; rope always
    interleaved. transformers' V2 never renormalises the kept weights, so `norm_topk_prob` must be false;
    it routes in float32 with either method (mlp.gate kept float32 in a bf16 model): router.float32 true."""

    model_type = "deepseek_v2"
    class_prefix = "DeepseekV2"
    heads = heads_of("none", "lm", "classifier")
    defaults = {"bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 2048}
    requires = {"scoring_func": "softmax", "moe_layer_freq": 1, "mlp_bias": False, "norm_topk_prob": False}
    moe_defaults = {"n_routed_experts": 64, "num_experts_per_tok": None, "n_shared_experts": 2,
                    "moe_intermediate_size": 1407, "routed_scaling_factor": 1.0}
    reads_layout = False
    ROUTERS = {"greedy": "softmax_topk", "group_limited_greedy": "group_limited_greedy"}  # topk_method -> zoo

    def router_from_hf(self, hf: Mapping[str, Any]) -> tuple[dict[str, Any], Checks]:
        method = hf.get("topk_method", "greedy")
        name = self.ROUTERS.get(method, "softmax_topk")
        groups = {"n_group": hf.get("n_group") or 1, "topk_group": hf.get("topk_group") or 1}
        return ({"name": name, "float32": True, **(groups if name == "group_limited_greedy" else {})},
                {"topk_method": (method, tuple(self.ROUTERS))})

    def router_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        methods = {zoo: hf for hf, zoo in self.ROUTERS.items()}
        return {"topk_method": methods.get(cfg.ffn.router.name, "greedy")}


def _mtp_layers(names: Iterable[str]) -> list[int]:
    """The indices of the layers whose tensors include `eh_proj` (a multi-token-prediction layer's own)."""
    return sorted({int(found[1]) for name in names if (found := _MTP.search(name))})
