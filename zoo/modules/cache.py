"""Key/value cache for incremental decoding: self-attention K/V grow by the new tokens each step;
cross-attention K/V are computed once per source and reused. A recurrent mixer (gated_deltanet, short_conv)
keeps fixed-size entries of its own instead (`LayerCache.state`: its convolution window and recurrent state,
one row per sequence), which follow the rows on reorder.

Rolling back (speculative decoding drops rejected draft tokens): K/V are cut at any length; a state cannot be
un-applied, so a cache told `keep_states(n)` has each recurrent layer keep its states after each of the last
n tokens of every forward (`LayerCache.history`, by length; n = the draft block + 1 covers every length a
verify pass can be cut at) and `crop` puts those back. The kept states live until the next crop."""

from __future__ import annotations

import torch


class LayerCache:
    """One layer's cached K/V (B, KV, S, D) in a buffer that doubles when full (amortised O(1) append)."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.length = 0
        self.cross_k: torch.Tensor | None = None
        self.cross_v: torch.Tensor | None = None
        self.state: dict[str, torch.Tensor] = {}  # a recurrent mixer's entries (B, ...), replaced each step
        self.keep = 0  # states kept after each of the last `keep` tokens of a forward (KVCache.keep_states)
        self.history: dict[int, dict[str, torch.Tensor]] = {}  # length -> the state after that many positions

    @property
    def stepping(self) -> bool:
        """True during a static cache's compiled one-token step (its mask is over the whole buffer)."""
        return False

    def states_wanted(self, t: int) -> int:
        """How many states a recurrent mixer hands `record` for a forward of t tokens: those after each of
        the last `keep` tokens, at least the final one."""
        return max(1, min(self.keep, t))

    def record(self, t: int, states: list[dict[str, torch.Tensor]]) -> None:
        """A recurrent mixer's entries after a forward of t tokens: `states` after each of the last
        len(states) of them, the final one last (it becomes `state`; the others are kept for `crop`)."""
        self.length += t
        self.state = states[-1]
        if self.keep:
            first = self.length - len(states) + 1
            self.history.update({first + i: state for i, state in enumerate(states)})

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new positions' k, v (B, KV, t, D); return all cached keys and values so far."""
        new_len = self.length + k.shape[2]
        if self.k is None or new_len > self.k.shape[2]:
            capacity = max(2 * new_len, 64)
            self.k, self.v = (self._grow(old, fresh, capacity) for old, fresh in ((self.k, k), (self.v, v)))
        self.k[:, :, self.length : new_len] = k
        self.v[:, :, self.length : new_len] = v
        self.length = new_len
        return self.k[:, :, :new_len], self.v[:, :, :new_len]

    def _grow(self, old: torch.Tensor | None, fresh: torch.Tensor, capacity: int) -> torch.Tensor:
        b, h, _, d = fresh.shape
        buf = fresh.new_empty(b, h, capacity, d)
        if old is not None:
            buf[:, :, : self.length] = old[:, :, : self.length]
        return buf

    def reorder(self, index: torch.Tensor, *, cross: bool = True) -> None:
        """Select batch rows (beam search: follow each surviving hypothesis's parent). `cross=False` keeps
        the cross-attention K/V: beams of one source share them, so a reorder within each source is a copy
        of identical rows."""
        for name in ("k", "v", "cross_k", "cross_v") if cross else ("k", "v"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.index_select(0, index))
        self.state = {name: value.index_select(0, index) for name, value in self.state.items()}
        self.history = {length: {name: value.index_select(0, index) for name, value in held.items()}
                        for length, held in self.history.items()}


class KVCache:
    """Per-layer caches of one decoder stack. Pass the same object to successive forward calls."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(n_layers)]
        self.length = 0  # positions already seen: the offset of the next token (advanced by the model)

    def reorder(self, index: torch.Tensor, *, cross: bool = True) -> None:
        for layer in self.layers:
            layer.reorder(index, cross=cross)

    def keep_states(self, n: int) -> None:
        """Let `crop` roll recurrent layers back within the last n tokens of each forward (see the module
        docstring); speculative decoding asks for its draft block + 1."""
        for layer in self.layers:
            layer.keep = n

    def crop(self, length: int) -> None:
        """Forget every position from `length` on (speculative decoding drops rejected draft tokens); the
        buffers keep their size and the next append overwrites the dropped slots; a recurrent layer takes
        back its state after `length` positions. Kept states are dropped: later crops are never shorter."""
        recurrent = [layer for layer in self.layers if layer.state]
        if length < self.length:
            lost = [layer for layer in recurrent if length not in layer.history]
            if lost:
                raise ValueError(
                    f"this cache holds a recurrent state (a layer's model.mixer), which cannot be rolled "
                    f"back from {self.length} to {length} positions: it keeps its states after the last "
                    f"{lost[0].keep} tokens of each forward (KVCache.keep_states), none after {length}.")
            for layer in recurrent:
                layer.state = layer.history[length]
        self.length = min(self.length, length)
        for layer in self.layers:
            layer.length = min(layer.length, length)
            layer.history = {}


class StaticLayerCache(LayerCache):
    """One layer's K/V in buffers (B, KV, S_max, D) allocated once (gpt-fast's static cache), so a compiled
    one-token step sees the same shapes every step. Prefill appends like LayerCache (python lengths);
    a decode step (`KVCache.step_index` set) writes its token at a tensor index and attends over the whole
    buffer, with unwritten slots masked by the caller."""

    def __init__(self, owner: StaticKVCache) -> None:
        super().__init__()
        self.owner = owner

    @property
    def stepping(self) -> bool:
        return self.owner.step_index is not None

    def record(self, t: int, states: list[dict[str, torch.Tensor]]) -> None:
        """The recurrent entries are fixed-size: allocated at prefill, then copied into in place, so the
        compiled step reads and writes the same buffers every token (the step's length moves by `advance`)."""
        if not self.state:
            self.state = {name: value.clone() for name, value in states[-1].items()}
        else:
            for name, value in states[-1].items():
                self.state[name].copy_(value)
        if not self.stepping:
            self.length += t

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None:  # zeros: masked slots must stay finite; k and v may differ in width (mla)
            self.k = k.new_zeros(*k.shape[:2], self.owner.max_len, k.shape[3])
            self.v = v.new_zeros(*v.shape[:2], self.owner.max_len, v.shape[3])
        index = self.owner.step_index
        if index is not None:  # compiled step: one token at a tensor position, the full buffer attended
            self.k.index_copy_(2, index, k)
            self.v.index_copy_(2, index, v)
            return self.k, self.v
        new_len = self.length + k.shape[2]
        if new_len > self.owner.max_len:
            raise ValueError(f"static KV cache holds {self.owner.max_len} "
                             f"positions; {new_len} were asked for.")
        self.k[:, :, self.length : new_len] = k
        self.v[:, :, self.length : new_len] = v
        self.length = new_len
        return self.k[:, :, :new_len], self.v[:, :, :new_len]


class StaticKVCache(KVCache):
    """Per-layer static caches of one decoder stack, `max_len` positions each (prompt + new tokens)."""

    def __init__(self, n_layers: int, max_len: int) -> None:
        self.max_len = max_len
        self.step_index: torch.Tensor | None = None  # (1,) slot of the token being decoded (step mode)
        self.layers = [StaticLayerCache(self) for _ in range(n_layers)]
        self.length = 0

    def advance(self, n: int = 1) -> None:
        """After a decode step: every layer's and the stack's length move on by n written positions."""
        self.length += n
        for layer in self.layers:
            layer.length += n
