"""SmolLM3: Llama's tensors and keys, a tied head, and no rotary on the layers `no_rope_layers` marks 0
(by default every `no_rope_layer_interval`-th layer, 4: layers 3, 7, ...) -> zoo's `model.layer_pattern`
(`[rope, rope, rope, nope]`; any pattern). Not supported: `use_sliding_window` (a window on the NoPE layers
only), biases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import pattern_of
from zoo.pretrained.family import Checks
from zoo.pretrained.llama import LlamaShaped


class SmolLM3(LlamaShaped):
    model_type = "smollm3"
    class_prefix = "SmolLM3"
    defaults = {"max_position_embeddings": 32768, "tie_word_embeddings": True}
    requires = {"attention_bias": False, "mlp_bias": False, "use_sliding_window": False}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)
        n, interval = settings["n_layers"], hf.get("no_rope_layer_interval", 4)
        flags = hf.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        pattern = pattern_of(["rope" if flag else "nope" for flag in flags], "rope")
        # one flag per layer: another length, read as a cycle, would rotate layers the file does not
        checks = {**checks, "len(no_rope_layers) == num_hidden_layers": (len(flags) == n, True)}
        return {**more, "layer_pattern": pattern}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        rotates = [cfg.layer_rotates(i) for i in range(cfg.n_layers)]
        # the 4.x-style interval where one gives these layers (transformers reads no_rope_layers first)
        interval = next((k for k in range(1, len(rotates) + 2)
                         if rotates == [(i + 1) % k != 0 for i in range(len(rotates))]), None)
        return {**super().more_to_hf(cfg), "no_rope_layers": [int(rotary) for rotary in rotates],
                **({} if interval is None else {"no_rope_layer_interval": interval})}
