"""Everything the explorer page shows, gathered from one real forward pass as plain JSON-safe data: the
tokens, the shape trace, attention weights per layer and head, masks, the positional pattern, next-token
logits, greedy-vs-beam tree, parameter and FLOP counts. Big tensors are packed (see pack.py) and the whole
page is held to `max_mb` (budget.py); whatever it leaves out is listed in `notes`, which the page shows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from zoo.inspection.attention import attention_maps, streams
from zoo.inspection.counts import flops_per_token, parameter_counts
from zoo.inspection.explorer.beams import beam_tree, can_generate
from zoo.inspection.explorer.budget import AttentionPart, LogitsPart, WholePart, fit_page
from zoo.inspection.explorer.pack import downsample, pack_float16
from zoo.inspection.plots import positional_pattern
from zoo.inspection.trace import trace
from zoo.modules.moe import moe_layers


def _attention(model, ids, kwargs, layers: Sequence[int] | None) -> list[AttentionPart]:
    """Every attention kind's weights per layer; `layers` (html_layers) narrows the candidates."""
    maps = attention_maps(model, ids, **kwargs)
    parts = []
    for kind, per_layer in maps.maps.items():
        n = len(per_layer)
        if layers is not None:
            bad = [i for i in layers if not 0 <= i < n]
            if bad:
                raise ValueError(f"html_layers={list(layers)}: {kind} attention "
                                 f"has layers 0..{n - 1}; {bad} out of range.")
        candidates = sorted(set(layers)) if layers is not None else list(range(n))
        parts.append(AttentionPart(kind, [w[0] for w in per_layer], candidates, *streams(kind),
                                   chosen=layers is not None))  # each (H, Tq, Tk)
    return parts


def _experts(model) -> list[dict[str, Any]]:
    """Mixture-of-Experts layers ([] for none), from their last forward: per token of the layer's stream, the
    experts it went to and their weights, best first."""
    rows = []
    for path, layer in moe_layers(model):
        last = layer.last
        if last is None or last.experts is None:
            continue
        rows.append({"layer": path.replace("_stack.layers", "").replace(".ffn", ""),
                     "stream": path.split("_stack")[0], "n_experts": layer.settings.n_experts,
                     "experts": last.experts.tolist(), "weights": [[round(w, 3) for w in row]
                                                                   for row in last.weights.float().tolist()]})
    return rows


def _masks(tr) -> list[WholePart]:
    """The additive masks as the explicit path adds them (first batch row, first head): -inf = hidden;
    finite non-zero entries are a bias (ALiBi, T5 relative) folded into the mask."""
    masks = []
    for name in ("mask", "local_mask", "cross_mask"):
        for rec in tr.select(name):  # one record per stack (the mask is built once and shared by its layers)
            m = rec.tensor[0, 0].float()  # (Tq, Tk)
            q, k = streams("cross") if name == "cross_mask" else (rec.stream, rec.stream)
            head = {"name": name, "stream": rec.stream, "q": q, "k": k, "heads": int(rec.tensor.shape[1])}
            masks.append(WholePart({**head, "values": pack_float16(m)}, {**head, "values": None},
                                   f"{rec.stream} {name.replace('_', ' ')}"))
    return masks


def _positional(model, n_positions: int) -> WholePart:
    scheme = model.config.positional.name
    drawn = positional_pattern(model.config, n_positions, model.positions)
    if drawn is None:
        note = {"scheme": scheme,
                "note": f"positional={scheme!r} has no pattern to draw (nothing is added or rotated)."}
        return WholePart(note, note, "positional pattern")
    matrix, xlabel = drawn
    small = downsample(matrix.float(), n_positions, 128)  # (P, F)
    kept = {"scheme": scheme, "xlabel": xlabel, "features": int(matrix.shape[1]),
            "values": pack_float16(small)}
    dropped = {"scheme": scheme,
               "note": "The positional pattern was left out to stay within html_max_mb (see the "
                       "notes at the top)."}
    return WholePart(kept, dropped, "positional pattern")


def _logits(logits: torch.Tensor, stream: str, vocab_label: Callable[[int], str]) -> LogitsPart:
    if logits.dim() == 2:  # a classifier head: one distribution over labels for the whole input
        return LogitsPart(logits[0, None].float(), "input", lambda i: f"label {i}")  # (1, num_labels)
    return LogitsPart(logits[0].float(), stream, vocab_label)  # (T, V)


def explorer_data(
    model,
    input_ids: list[int],
    *,
    tokens: list[str],
    vocab_label: Callable[[int], str],
    decoder_ids: list[int] | None = None,
    decoder_tokens: list[str] | None = None,
    eos_ids: Sequence[int] | None = None,
    layers: Sequence[int] | None = None,
    num_beams: int = 3,
    max_new_tokens: int = 8,
    n_positions: int = 64,
    max_mb: float = 4.0,
    title: str = "",
    source: str = "",
) -> dict[str, Any]:
    """The page's data for `input_ids` (labels `tokens`); encoder-decoder models also take the decoder input
    (`decoder_ids`, starting with config.start_id). `vocab_label(id)` names any vocabulary entry. The page
    rendered from it is at most `max_mb` MB (see budget.py; PageBudgetError when it cannot be)."""
    if not input_ids:
        raise ValueError("explorer: input_ids is empty; give at least one token.")
    if len(tokens) != len(input_ids):
        raise ValueError(f"explorer: {len(tokens)} token labels for {len(input_ids)} input ids.")
    if model.is_encoder_decoder and not decoder_ids:
        raise ValueError("explorer: an encoder-decoder model needs decoder_ids (start token + target ids).")
    if num_beams < 1 or max_new_tokens < 1:
        raise ValueError("explorer: html_beams and html_new_tokens must "
                         f"be >= 1, got {num_beams}, {max_new_tokens}.")
    if not max_mb > 0:
        raise ValueError(f"explorer: html_max_mb must be > 0, got {max_mb!r}.")
    model.eval()
    mcfg = model.config
    ids = torch.tensor([input_ids])
    kwargs: dict[str, Any] = {}
    labelled = {model.self_stream if not model.is_encoder_decoder else "encoder": (input_ids, tokens)}
    if model.is_encoder_decoder:
        kwargs["decoder_input_ids"] = torch.tensor([decoder_ids])
        labelled["decoder"] = (decoder_ids, decoder_tokens or [vocab_label(i) for i in decoder_ids])
    attention = _attention(model, ids, kwargs, layers)  # first: a bad html_layers fails fast
    tr = trace(model, ids, **kwargs)
    experts = _experts(model)  # the routing of the traced forward (beam search runs the layers again)
    out_stream = "decoder" if model.is_encoder_decoder else model.self_stream
    logits = _logits(tr.output.logits, out_stream, vocab_label)
    if can_generate(model):
        beams = beam_tree(model, list(input_ids), label=vocab_label, num_beams=num_beams,
                          max_new_tokens=max_new_tokens, eos_ids=eos_ids)
    else:
        beams = {"note": f"arch={mcfg.arch!r} does not generate text (zoo's decoder runs decoder and "
                         f"encoder_decoder models), so there is no greedy or beam search to show."}
    flops = flops_per_token(model, len(input_ids))
    fixed = {
        "title": title or f"{mcfg.arch} model",
        "source": source,
        "config": mcfg.to_dict(),
        "tokens": {s: [{"id": i, "label": t} for i, t in zip(*labelled[s], strict=True)] for s in labelled},
        "trace": tr.to_rows(),
        "attention": None, "masks": None, "positional": None, "logits": None,  # filled within the size budget
        "beams": beams,
        "experts": experts,
        "params": parameter_counts(model),
        "flops": {key: getattr(flops, key) for key in ("seq_len", "n_matmul", "n_attn", "d_attn", "attention",
                                                       "forward", "training", "formula")},
        "notes": [],
    }
    return fit_page(fixed, logits=logits, positional=_positional(model, n_positions), attention=attention,
                    masks=_masks(tr), max_mb=max_mb)
