"""MiniCPM3 both ways: DeepSeek-V2's latent attention (deepseek.py's LatentDecoder: `q_lora_rank`,
`kv_lora_rank`, per-head sizes; rope rotate-half, as MiniCPM3 applies cos/sin to the rope part) in Llama's
dense decoder, with three scalings of its own:
- `scale_emb`: the token embeddings times it (model.embed_multiplier);
- `scale_depth`: each residual branch times scale_depth / sqrt(num_hidden_layers) (model.depth_scale);
- `dim_model_base`: the last hidden state divided by hidden_size / dim_model_base before the LM head
  (model.head.scale = dim_model_base / hidden_size; written back as dim_model_base = hidden_size x scale, and
  hidden_size itself where the head has no scale; the other heads read it not).
RoPE: plain, or LongRoPE (MiniCPM3-4B: per-pair short / long factors, model.positional.scaling=longrope).
`v_head_dim` absent means qk_nope_head_dim, as the config class resolves it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import ROPE_TYPES, Key, Rope
from zoo.pretrained.deepseek import KEYS, LatentDecoder, heads_of
from zoo.pretrained.family import Checks


class MiniCPM3(LatentDecoder):
    model_type = "minicpm3"
    class_prefix = "MiniCPM3"
    heads = heads_of("none", "lm", "classifier")
    keys = (*KEYS, Key("embed_multiplier", "scale_emb", 12.0), Key("depth_scale", "scale_depth", 1.4))
    fixed = {**LatentDecoder.fixed, "positional.layout": "half"}
    requires = {"mlp_bias": False}
    defaults = {"vocab_size": 73448, "rms_norm_eps": 1e-5, "max_position_embeddings": 32768,
                "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "q_lora_rank": 768,
                "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": None}
    rope = Rope({**ROPE_TYPES, "longrope": "longrope"})
    DIM_MODEL_BASE = 256  # the config class's default

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        rope, checks = self.rope.from_hf(hf)
        d = settings["d_model"]
        base = hf.get("dim_model_base", self.DIM_MODEL_BASE)
        checks["dim_model_base (a number > 0)"] = (isinstance(base, (int, float)) and base > 0, True)
        scale = None if not isinstance(base, (int, float)) or base <= 0 or base == d else base / d
        v_dim = settings["mixer.v_head_dim"] or settings["mixer.qk_nope_head_dim"]
        return {**rope, "mixer.v_head_dim": v_dim, **self.lm_keys(hf, {"head.scale": scale})}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        scale = getattr(cfg.head, "scale", None) if cfg.head.name == "lm" else None
        base = cfg.d_model if scale is None else cfg.d_model * scale
        return {**self.rope.to_hf(cfg), "num_key_value_heads": cfg.n_heads,
                "dim_model_base": int(base) if float(base).is_integer() else base,
                "scale_depth": 1.0 if cfg.depth_scale is None else cfg.depth_scale}
