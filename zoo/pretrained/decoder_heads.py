"""The heads of the decoder families as transformers stores them (zoo.pretrained.heads: one `HeadLayout` per
zoo head): the causal LM's `lm_head` (tied to the token table or not), `*ForSequenceClassification`'s `score`
(no bias; transformers pools the last non-pad token, as zoo's decoder classifier does),
`*ForTokenClassification`'s `score` or `classifier`, `*ForQuestionAnswering`'s `qa_outputs`, and the bare
`*Model` (no head tensors, names without the base prefix)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from zoo.config import ModelConfig
from zoo.pretrained.heads import HeadLayout
from zoo.pretrained.tensor_map import HFTensors, stored_name


@dataclass(frozen=True)
class CausalLMLayout(HeadLayout):
    """A vocabulary projection `proj` without bias: the token table `tokens` when config.json ties them (a
    stored copy is dropped), else its own weight, read under `proj` or `alias` (GPT-NeoX: `embed_out` or
    `lm_head`)."""

    alias: str | None = None
    tokens: str = "embed.tokens.weight"  # the zoo token table a tied head shares

    def origins(self) -> dict[str, str]:
        return {"head.proj.weight": f"{self.proj}.weight"}

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor],
                shapes: Mapping[str, tuple[int, ...]]) -> None:
        names = [f"{n}.weight" for n in (self.proj, self.alias) if n]
        if cfg.tie_embeddings:
            for name in names:
                src.discard(name)
            out["head.proj.weight"] = out[self.tokens]
            return
        stored = next((n for n in reversed(names) if src.has(n)), names[0])
        out["head.proj.weight"] = src.take(stored, (cfg.vocab_size, cfg.d_model))

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str
              ) -> dict[str, torch.Tensor]:
        if cfg.tie_embeddings:  # a tied head is left out of the file, as transformers 5 saves it
            return {}
        return {stored_name(f"{self.proj}.weight", prefix): state["head.proj.weight"]}


BARE = HeadLayout("none", bare=True)
LM = CausalLMLayout("lm", proj="~lm_head")
SCORE = HeadLayout("classifier", proj="~score", proj_bias=False, labelled=True)
QA = HeadLayout("qa", proj="~qa_outputs")


def token_classifier(proj: str) -> HeadLayout:
    """`*ForTokenClassification`'s projection (with a bias): `~score` (Llama-shaped) or `~classifier`
    (GPT-2)."""
    return HeadLayout("token_classifier", proj=proj, labelled=True)


# zoo head -> layout of a Llama-shaped family (Llama, Qwen2,
# Qwen3: its QA class keeps the base as `transformer.`)
LLAMA_HEADS: dict[str, HeadLayout] = {
    "none": BARE, "lm": LM, "classifier": SCORE, "token_classifier": token_classifier("~score"),
    "qa": HeadLayout("qa", proj="~qa_outputs", prefix="transformer."),
}
NO_QA = {head: layout for head, layout in LLAMA_HEADS.items() if head != "qa"}  # Phi-3, Gemma, Gemma 2
