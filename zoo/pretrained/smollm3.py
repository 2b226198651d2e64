"""SmolLM3: Llama's tensors and keys, a tied head, and no rotary on the layers `no_rope_layers` marks 0
(every `no_rope_layer_interval`-th layer, 4: layers 3, 7, ...) -> zoo `nope_every`. Not supported: a NoPE
pattern other than every k-th layer, `use_sliding_window` (a window on the NoPE layers only), biases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.family import Checks
from zoo.pretrained.llama import LlamaShaped


def nope_every_for(rotates: list[bool]) -> int | None:
    """zoo's `nope_every` giving this per-layer rotary pattern (True: the layer rotates), or None."""
    for every in range(len(rotates) + 1):
        if [ModelConfig(nope_every=every).layer_rotates(i) for i in range(len(rotates))] == rotates:
            return every
    return None


class SmolLM3(LlamaShaped):
    model_type = "smollm3"
    class_prefix = "SmolLM3"
    defaults = {"max_position_embeddings": 32768, "tie_word_embeddings": True}
    requires = {"attention_bias": False, "mlp_bias": False, "use_sliding_window": False}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        more, checks = super().more_from_hf(hf, settings)
        n, interval = settings["n_layers"], hf.get("no_rope_layer_interval", 4)
        flags = hf.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        every = nope_every_for([bool(flag) for flag in flags])
        checks["no_rope_layers every k-th layer 0, the rest 1"] = (every is not None, True)
        return {**more, "nope_every": every or 0}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {**super().more_to_hf(cfg), "no_rope_layer_interval": cfg.nope_every or cfg.n_layers + 1,
                "no_rope_layers": [int(cfg.layer_rotates(i)) for i in range(cfg.n_layers)]}
