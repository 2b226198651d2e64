"""``data=prompts``: prompts from a JSONL file in trl's prompt-only format (zoo.data.prompts: text or
messages, with any other fields the reward functions read), encoded into the cache: each prompt's ids, its
fields as UTF-8 JSON and whether it was messages (a rollout of a chat prompt also stops at the turn's end)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoo.data.cache import RaggedIds, id_dtype
from zoo.data.documents import Documents, TextList
from zoo.data.prompts import PromptRow, encode_prompt, fields_bytes, read_prompts_jsonl
from zoo.data.sources.base import Encoded, HeldCorpus, register_source, split_rows

LAYOUT = "2: <split>.conversational"  # 1 (no version): prompt and fields only


@dataclass(frozen=True)
class PromptCorpus(HeldCorpus):
    """Prompt rows per split, each with the line of the file it came from."""

    train: list[PromptRow]
    val: list[PromptRow]
    kind = "prompts"

    def content(self) -> dict[str, list[str]]:
        return {split: [r.content() for r in rows] for split, rows in self.splits().items()}

    def fingerprint(self) -> dict[str, str]:
        """The rows' content and the entry's layout (an entry without `<split>.conversational` is not
        reused)."""
        return {**super().fingerprint(), "layout": LAYOUT}

    def tokenizer_docs(self) -> Documents:
        """Each prompt's text and its fields' values (a tokenizer trained here can spell the answers)."""
        docs = []
        for r in self.train:
            prompt = r.prompt if not r.conversational else \
                " ".join(str(m.get("content", "")) for m in r.prompt)
            docs += [prompt, *(str(v) for v in r.fields.values())]
        return TextList(docs)

    def encode(self, tokenizer, fingerprints: dict[str, str] | None = None) -> Encoded:
        """``<split>.prompt``: token ids per row; ``<split>.fields``: its other fields as UTF-8 JSON bytes;
        ``<split>.conversational``: 1 where the prompt is messages (rendered through the chat template)."""
        arrays: dict = {}
        dtype = id_dtype(tokenizer.vocab_size)  # the manifest's; bytes (< 256) fit any
        for split, rows in self.splits().items():
            prompts = [encode_prompt(r, tokenizer) for r in rows]
            arrays[f"{split}.prompt"] = RaggedIds.from_rows(prompts, dtype)
            arrays[f"{split}.fields"] = RaggedIds.from_rows([fields_bytes(r) for r in rows], dtype)
            arrays[f"{split}.conversational"] = np.array([r.conversational for r in rows], dtype=np.int64)
        return arrays, None


@register_source("prompts")
def load_prompts(*, path: str, val_fraction: float = 0.1, seed: int = 0, whole: bool = False) -> PromptCorpus:
    """Prompt rows of a JSONL file (every line checked first, errors naming file:line) with a seeded
    train/validation split."""
    rows = read_prompts_jsonl(path)
    return PromptCorpus(*split_rows(rows, val_fraction, seed, whole))
