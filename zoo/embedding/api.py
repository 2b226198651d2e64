"""`embed(model, tokenizer, texts)`: one vector per text from a model's last hidden states, pooled over the
text's real tokens; `load_embedder(folder)` reads a Hugging Face or sentence-transformers folder and applies
what the folder says (pooling, normalisation, length, prompt), as `SentenceTransformer(folder).encode`
does."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from zoo.embedding.folder import MODULES_FILE, EmbedSettings, read_settings
from zoo.embedding.pooling import POOLINGS
from zoo.tokenizers import load_hf_tokenizer
from zoo.utils import eval_mode


class Tokenized(NamedTuple):
    """Each text's ids with the tokenizer's specials around them, and how many texts were cut to fit."""

    ids: list[np.ndarray]
    cut: int


@dataclass
class Embedder:
    """A model, its tokenizer and the settings that turn texts into embeddings (`encode`). The pooling name
    and the model are checked when it is made, before any text is read."""

    model: Any  # a ZooModel whose forward returns hidden_states (any head; head=none skips the head's work)
    tokenizer: Any  # a ZooTokenizer: its template frames each text, its padding id pads
    settings: EmbedSettings = dataclasses.field(default_factory=EmbedSettings)

    def __post_init__(self) -> None:
        self.pool = POOLINGS.get(self.settings.pooling)
        if getattr(self.model, "is_encoder_decoder", False):
            raise ValueError("zoo.embed takes an encoder or a decoder; this model is an encoder-decoder.")
        limit = self.model.config.max_seq_len
        if self.settings.max_length is not None and self.settings.max_length < 1:
            raise ValueError(f"max_length={self.settings.max_length} must be >= 1 (or None: the model's "
                             f"max_seq_len, {limit}).")
        # a folder may say more than the model's positions hold: those never fit, so the model's limit wins
        self.max_length = min(self.settings.max_length or limit, limit)

    def tokenize(self, texts: Sequence[str]) -> Tokenized:
        """`prompt + text` (lowercased if the folder says so) framed by the tokenizer's template, the content
        cut so the whole fits max_length (transformers' truncation of one sequence)."""
        texts = check_texts(texts)
        s = self.settings
        content = self.tokenizer.encode_batch([(s.prompt + t).lower() if s.lowercase else s.prompt + t
                                               for t in texts])
        ids = [self.tokenizer.specials.frame(c, self.max_length) for c in content]
        room = self.max_length - len(self.tokenizer.specials.prefix) - len(self.tokenizer.specials.suffix)
        return Tokenized(ids, sum(len(c) > room for c in content))

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """(N, d) float32 on the CPU, row i the embedding of texts[i]."""
        return self.embed_ids(self.tokenize(texts).ids, batch_size)

    def embed_ids(self, ids: Sequence[Sequence[int]], batch_size: int = 32) -> torch.Tensor:
        """(N, d) embeddings of framed id lists; batches of similar length (longest first), right-padded."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1.")
        if not ids:
            return torch.empty(0, self.model.config.d_model)
        device = next(self.model.parameters()).device
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        vectors = []
        with torch.inference_mode(), eval_mode(self.model):
            for start in range(0, len(order), batch_size):
                chunk = order[start:start + batch_size]
                rows = [torch.as_tensor(np.asarray(ids[i], dtype=np.int64)) for i in chunk]
                input_ids = pad_sequence(rows, batch_first=True, padding_value=self.tokenizer.padding_id)
                mask = pad_sequence([torch.ones_like(r) for r in rows], batch_first=True)  # (b, T) 1 = real
                input_ids, mask = input_ids.to(device), mask.to(device)
                hidden = self.model(input_ids, attention_mask=mask).hidden_states  # (b, T, C)
                pooled = self.pool(hidden.float(), mask)  # (b, C)
                if self.settings.normalize:
                    pooled = F.normalize(pooled, p=2, dim=-1)
                vectors.append(pooled.cpu())
        return torch.cat(vectors)[torch.tensor(order).argsort()]  # back in the order of `ids`


def embed(model: Any, tokenizer: Any, texts: Sequence[str], *, pooling: str = "mean", normalize: bool = False,
          batch_size: int = 32, max_length: int | None = None) -> torch.Tensor:
    """(N, d) float32 embeddings of `texts`: the model's last hidden states pooled over each text's real
    tokens (`pooling`: mean, cls, last or max; zoo.embedding.POOLINGS), L2-normalised with `normalize=True`.
    Each text is framed by the tokenizer's template ([CLS] text [SEP]) and cut to `max_length` tokens
    (None: the model's max_seq_len). For a folder's own settings use `load_embedder(folder).encode(texts)`."""
    settings = EmbedSettings(pooling=pooling, normalize=normalize, max_length=max_length)
    return Embedder(model, tokenizer, settings).encode(texts, batch_size)


def load_embedder(folder: str | os.PathLike, *, pooling: str | None = None, normalize: bool | None = None,
                  max_length: int | None = None, dtype: str | torch.dtype | None = None) -> Embedder:
    """An Embedder for a Hugging Face model folder. A sentence-transformers folder (modules.json) gives its
    pooling, Normalize, max_seq_length, do_lower_case and default prompt; any argument given here replaces
    the folder's value. A plain model folder pools `mean` without normalising unless told otherwise."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder; expected a Hugging Face model folder "
                                "(config.json, weights, tokenizer.json), a sentence-transformers one "
                                "(modules.json) included.")
    sentence_transformers = (folder / MODULES_FILE).is_file()
    settings = read_settings(folder) if sentence_transformers else EmbedSettings(model_dir=folder)
    given = {"pooling": pooling, "normalize": normalize, "max_length": max_length}
    settings = dataclasses.replace(settings, **{k: v for k, v in given.items() if v is not None})
    POOLINGS.get(settings.pooling)  # an unknown name fails before the weights are read
    from zoo.pretrained import from_pretrained

    model_dir = settings.model_dir or folder
    return Embedder(from_pretrained(model_dir, dtype=dtype), load_hf_tokenizer(model_dir), settings)


def check_texts(texts: Iterable[str]) -> list[str]:
    """`texts` as a list of str; a bare str or a non-str item is one clear error."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, got one str; pass [text].")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is a {type(text).__name__}, not a str.")
    return texts
