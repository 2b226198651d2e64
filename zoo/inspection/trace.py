"""Shape trace of one real forward pass: forward hooks on the model's own submodules plus the core's
`tap` attributes on Attention/FeedForward. Everything is installed on entry and removed on exit, so an
untraced model runs exactly the code it always runs (taps are None, no hooks)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from zoo.modules.block import MIXERS, Block, Stack  # every mixer registered
from zoo.modules.embedding import Embeddings
from zoo.modules.feedforward import FeedForward
from zoo.modules.heads import OutputHead
from zoo.modules.norm import norm_module_types
from zoo.utils import module_mode

_LAYER = re.compile(r"\blayers\.(\d+)\b")
# Top-level attribute -> which stream (encoder / decoder) its records belong to; `embed` depends on arch.
_SCOPES = {"encoder_stack": "encoder", "src_embed": "encoder", "decoder_stack": "decoder",
           "tgt_embed": "decoder"}


@dataclass
class Record:
    """One traced tensor: stage `name`, `layer` index (None outside the stack), its `stream`
    (encoder/decoder), `shape`, the detached tensor, the qualified `module` name and the `kind` of probe
    (hook = module output, pre = module input, tap = inside attention/FFN, derived = computed from the
    module's own code on the forward's inputs)."""

    name: str
    layer: int | None
    stream: str
    shape: tuple[int, ...]
    module: str
    kind: str
    tensor: torch.Tensor | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "layer": self.layer, "stream": self.stream, "shape": list(self.shape),
                "module": self.module, "kind": self.kind}


class Trace:
    """The ordered records of one forward pass; iterable, indexable, filterable, printable as a table."""

    def __init__(self, records: list[Record] | None = None, output: Any = None) -> None:
        self.records: list[Record] = records if records is not None else []
        self.output = output  # the model's ModelOutput, when traced through `trace(...)`

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> Record:
        return self.records[i]

    def select(self, name: str | None = None, *, layer: int | None = None,
               stream: str | None = None) -> list[Record]:
        """Records matching every given field (None = any)."""
        return [r for r in self.records
                if (name is None or r.name == name) and (layer is None or r.layer == layer)
                and (stream is None or r.stream == stream)]

    def get(self, name: str, *, layer: int | None = None, stream: str | None = None) -> Record:
        """The single record with this name (and layer/stream); raises ValueError naming what exists."""
        found = self.select(name, layer=layer, stream=stream)
        if len(found) != 1:
            names = sorted({r.name for r in self.records})
            raise ValueError(
                f"trace has {len(found)} records named {name!r} (layer={layer}, stream={stream}); "
                f"give layer/stream to pick one. Names: {', '.join(names)}."
            )
        return found[0]

    def names(self) -> list[str]:
        return list(dict.fromkeys(r.name for r in self.records))

    def to_rows(self) -> list[dict[str, Any]]:
        """Plain data (JSON-safe): one dict per record, no tensors."""
        return [r.as_dict() for r in self.records]

    def table(self, *, layers: list[int] | None = None, title: str = "shape trace"):
        """A rich Table; `layers` keeps only those layer indices (records outside layers are always kept)."""
        from rich.table import Table

        table = Table(title=title)
        for col in ("#", "stream", "layer", "stage", "shape", "module", "probe"):
            table.add_column(col, justify="right" if col in ("#", "layer") else "left")
        for i, r in enumerate(self.records):
            if layers is not None and r.layer is not None and r.layer not in layers:
                continue
            table.add_row(str(i), r.stream, "" if r.layer is None else str(r.layer), r.name,
                          "[" + ", ".join(map(str, r.shape)) + "]", r.module, r.kind)
        return table

    def print(self, *, layers: list[int] | None = None, console=None) -> None:
        from rich.console import Console

        (console or Console(width=140)).print(self.table(layers=layers))


def _stream_of(path: str, default: str) -> str:
    top = path.split(".", 1)[0]
    return _SCOPES.get(top, default)


def _materialise_mask(mask, q_len: int, k_len: int) -> torch.Tensor:
    """What the explicit attention path adds to the scores: 0 (visible), -inf (masked) or a bias."""
    return mask.apply(torch.zeros(1, 1, q_len, k_len))  # (B|1, H|1, Tq, Tk)


class Tracer:
    """Context manager: `with Tracer(model) as tr: model(ids)`, then `tr.trace`. Hooks and taps exist only
    inside the `with`; they are removed on exit even if the forward raised."""

    def __init__(self, model: nn.Module, *, keep_tensors: bool = True) -> None:
        self.model = model
        self.keep_tensors = keep_tensors
        self.trace = Trace()
        self._handles: list[Any] = []
        self._tapped: list[nn.Module] = []
        self._default_stream = getattr(model, "self_stream", "decoder")
        self._stream = self._default_stream  # set by Embeddings/Stack pre-hooks (shared token tables)
        self._embed: tuple[str, Embeddings, torch.Tensor] | None = None  # the Embeddings now running
        self._seen: set[int] = set()

    # ----- recording -----
    def _add(self, name: str, value: Any, path: str, kind: str) -> None:
        if not isinstance(value, torch.Tensor):
            return
        m = _LAYER.search(path)
        tensor = value.detach().clone() if self.keep_tensors else None
        self.trace.records.append(
            Record(name, int(m.group(1)) if m else None, self._stream, tuple(value.shape), path, kind, tensor)
        )

    def _on(self, module: nn.Module, *, pre: Callable | None = None, post: Callable | None = None) -> None:
        if pre is not None:
            self._handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        if post is not None:
            self._handles.append(module.register_forward_hook(post, with_kwargs=True))

    # ----- installing probes, one rule per module type -----
    def _probe_embeddings(self, path: str, mod: Embeddings) -> None:
        def pre(_m, args, kwargs):
            self._stream, self._embed = _stream_of(path, self._default_stream), (path, mod, args[1])
            self._add("input_ids", args[0], path, "pre")

        self._on(mod, pre=pre, post=lambda _m, _a, _k, out: self._add("embedding", out, path, "hook"))
        if id(mod.tokens) not in self._seen:  # a shared table (source/target) gets one hook, fired by both
            self._seen.add(id(mod.tokens))
            self._handles.append(mod.tokens.register_forward_hook(self._on_tokens))
        if mod.types is not None:
            self._handles.append(mod.types.register_forward_hook(
                lambda _m, _i, out: self._add("token_type_embedding", out, f"{path}.types", "hook")))

    def _on_tokens(self, _m, _inputs, out) -> None:
        """Token lookup (B, T, C), then the additive positional term computed by the active scheme's own
        `add` on the forward's position ids (sinusoidal, learned); rotary/ALiBi show up at the stack."""
        path, embeddings, position_ids = self._embed
        self._add("token_embedding", out, f"{path}.tokens", "hook")
        positional = embeddings.positional
        if positional.adds_to_embeddings:
            with torch.no_grad():
                term = positional.add(torch.zeros_like(out), position_ids)  # (B, T, C)
            self._add("positional", term, f"{path}.positional", "derived")

    def _probe_stack(self, path: str, mod: Stack) -> None:
        def pre(_m, args, kwargs):
            self._stream = _stream_of(path, self._default_stream)
            x, mask = args[0], args[1]
            positions = args[2] if len(args) > 2 else kwargs.get("positions")
            self._add("stack_input", x, path, "pre")
            q_len, cache = x.shape[1], kwargs.get("cache")
            k_len = q_len + (cache.length if cache is not None else 0)  # with a cache: its past + T keys
            self._add("mask", _materialise_mask(mask, q_len, k_len), path, "derived")
            if mask.local is not None:  # what the sliding-window layers of this stack attend with
                self._add("local_mask", _materialise_mask(mask.local, q_len, k_len), path, "derived")
            memory, memory_mask = kwargs.get("memory"), kwargs.get("memory_mask")
            if memory is not None and memory_mask is not None:
                self._add("cross_mask", _materialise_mask(memory_mask, q_len, memory.shape[1]), path,
                          "derived")
            if positions is not None and positions.rotates:
                self._add("rotation_cos", positions.cos, f"{path}.positions", "derived")
                self._add("rotation_sin", positions.sin, f"{path}.positions", "derived")
            if positions is not None and positions.bias is not None:
                self._add("position_bias", positions.bias, f"{path}.positions", "derived")

        self._on(mod, pre=pre, post=lambda _m, _a, _k, out: self._add("stack_output", out[0], path, "hook"))

    def _probe_block(self, path: str, mod: Block) -> None:
        self._on(mod, pre=lambda _m, args, _k: self._add("block_input", args[0], path, "pre"),
                 post=lambda _m, _a, _k, out: self._add("block_output", out[0], path, "hook"))

    def _probe_attention(self, path: str, mod: nn.Module) -> None:
        prefix = "cross_" if mod.cross else ""
        mod.tap = lambda name, t: self._add(prefix + name, t, path, "tap")
        self._tapped.append(mod)
        out_name = "cross_output" if mod.cross else "attn_output"
        self._on(mod, post=lambda _m, _a, _k, out: self._add(out_name, out[0], f"{path}.o", "hook"))

    def _probe_ffn(self, path: str, mod: FeedForward) -> None:
        mod.tap = lambda name, t: self._add(name, t, path, "tap")
        self._tapped.append(mod)
        self._on(mod, post=lambda _m, _a, _k, out: self._add("ffn_output", out, path, "hook"))

    def _probe_norm(self, path: str, mod: nn.Module) -> None:
        label = path.rsplit(".", 1)[-1]  # norm_self, norm_cross, norm_ffn, final_norm, transform_norm
        label = "embed_norm" if label == "norm" else label
        self._on(mod, pre=lambda _m, args, _k: self._add(f"{label}_in", args[0], path, "pre"),
                 post=lambda _m, _a, _k, out: self._add(label, out, path, "hook"))

    def _probe_head(self, path: str, mod: nn.Module) -> None:
        self._on(mod, post=lambda _m, _a, _k, out: self._add("logits", out, path, "hook"))

    def _rules(self) -> list[tuple[tuple[type, ...], Callable[[str, Any], None]]]:
        return [
            ((Embeddings,), self._probe_embeddings),
            ((Stack,), self._probe_stack),
            ((Block,), self._probe_block),
            (tuple(MIXERS.get(n) for n in MIXERS.names()), self._probe_attention),  # every mixer
            ((FeedForward,), self._probe_ffn),
            (norm_module_types(), self._probe_norm),
            ((OutputHead,), self._probe_head),
        ]

    # ----- context manager -----
    def __enter__(self) -> Tracer:
        if self._handles or self._tapped:
            raise RuntimeError("this Tracer is already active; use a new one per `with`.")
        rules = self._rules()
        try:
            for path, module in self.model.named_modules():
                for types, install in rules:
                    if isinstance(module, types):
                        install(path, module)
                        break
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove every hook and tap this tracer installed (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for module in self._tapped:
            module.__dict__.pop("tap", None)  # back to the class attribute: None
        self._tapped.clear()
        self._seen.clear()


def trace(
    model: nn.Module, input_ids: torch.Tensor, *, keep_tensors: bool = True, train_mode: bool = False,
    **forward_kwargs: Any,
) -> Trace:
    """Run `model(input_ids, **forward_kwargs)` once without gradients and return its shape trace; the loss
    (when labels are given) is the last record. The pass runs in eval mode (no dropout: the recorded numbers
    are reproducible) unless `train_mode=True`; the model's mode is restored afterwards."""
    tracer = Tracer(model, keep_tensors=keep_tensors)
    with module_mode(model, training=train_mode), torch.no_grad(), tracer:
        output = model(input_ids, **forward_kwargs)
    tracer.trace.output = output
    tracer._add("loss", getattr(output, "loss", None), "loss", "output")  # no loss (no labels): no record
    return tracer.trace
