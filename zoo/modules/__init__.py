"""Blocks: attention, feed-forward, norms, positions, embeddings, heads, the layer stack and the KV cache."""
