"""``data=preference``: preference pairs from a JSONL file in trl's format (zoo.data.preference: prompt /
chosen / rejected, or chosen / rejected with the prompt implicit; text or messages), encoded the way trl's
DPOTrainer encodes them (prompt, then each completion: text with its eos, messages through the chat
template) into the cache."""

from __future__ import annotations

from dataclasses import dataclass

from zoo.data.cache import RaggedIds, id_dtype
from zoo.data.documents import Documents, TextList
from zoo.data.preference import PreferenceRow, encode_preference, read_preference_jsonl
from zoo.data.sources.base import Encoded, HeldCorpus, register_source, split_rows

PARTS = ("prompt", "chosen", "rejected")


@dataclass(frozen=True)
class PreferenceCorpus(HeldCorpus):
    """Preference pairs per split, each with the line of the file it came from."""

    train: list[PreferenceRow]
    val: list[PreferenceRow]
    kind = "preference"

    def content(self) -> dict[str, list[str]]:
        return {split: [r.content() for r in rows] for split, rows in self.splits().items()}

    def tokenizer_docs(self) -> Documents:
        """Each prompt with each of its completions (a tokenizer trained here; messages: their content)."""
        docs: list[str] = []
        for r in self.train:
            docs += [r.content()] if r.conversational else [r.prompt + r.chosen, r.prompt + r.rejected]
        return TextList(docs)

    def encode(self, tokenizer, fingerprints: dict[str, str] | None = None) -> Encoded:
        """``<split>.prompt``, ``<split>.chosen``, ``<split>.rejected``: token ids per pair (each completion
        ending in eos, which task=dpo's tokenizer check makes sure of, or in the template's end of turn;
        zoo.data.preference.encode_preference)."""
        arrays: dict = {}
        dtype = id_dtype(tokenizer.vocab_size)
        for split, rows in self.splits().items():
            pairs = [encode_preference(row, tokenizer) for row in rows]
            for part in PARTS:
                arrays[f"{split}.{part}"] = RaggedIds.from_rows([getattr(p, part) for p in pairs], dtype)
        return arrays, None


@register_source("preference")
def load_preference(*, path: str, val_fraction: float = 0.1, seed: int = 0,
                    whole: bool = False) -> PreferenceCorpus:
    """Preference pairs of a JSONL file (every line checked first, errors naming file:line) with a seeded
    train/validation split."""
    rows = read_preference_jsonl(path)
    return PreferenceCorpus(*split_rows(rows, val_fraction, seed, whole))
