"""Blocks: attention, feed-forward, norms, positions, embeddings, heads, the layer stack and the KV cache."""

import zoo.modules.relative_bias  # noqa: F401  (registers the t5_relative positional scheme)
