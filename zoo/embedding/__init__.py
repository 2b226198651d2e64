"""Sentence embeddings: `zoo.embed(model, tokenizer, texts, pooling=...)` pools a model's last hidden states
into one vector per text; `zoo.load_embedder(folder)` applies what a sentence-transformers folder says
(pooling, Normalize, max_seq_length), equal to that package's `encode`. Command line:
`python -m zoo.embedding`."""

from zoo.embedding.api import Embedder, embed, load_embedder
from zoo.embedding.folder import EmbedSettings
from zoo.embedding.pooling import POOLINGS

__all__ = ["POOLINGS", "EmbedSettings", "Embedder", "embed", "load_embedder"]
