"""Greedy vs beam search for one prompt as a small tree: the hypotheses come from zoo's own decoder
(`zoo.generation.generate`), the per-token log-probabilities from a teacher-forced forward of each hypothesis
(zoo's stepper on every prefix when a fixed position window crops the context), and
each expanded node also lists its best next tokens that no hypothesis took (what the search passed over)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from zoo.generation import generate
from zoo.generation.api import STEPPERS
from zoo.utils import eval_mode


def can_generate(model) -> bool:
    """Whether zoo's decoder runs this architecture (decoder, encoder_decoder); encoders do not generate."""
    return model.config.arch in STEPPERS


def _new_tokens(row: list[int], prompt_len: int, eos_ids: Sequence[int]) -> list[int]:
    """The generated part of a returned row, up to and including the first EOS (pads after it dropped)."""
    new = row[prompt_len:]
    return new[: next((i + 1 for i, token in enumerate(new) if token in eos_ids), len(new))]


def _next_logprobs(model, source: list[int], prefix: list[int], pad_id: int) -> torch.Tensor:
    """log p(next token | source, prefix) (V,) from zoo's stepper (no cache; windows handled as in
    decoding)."""
    ids = torch.tensor([source])
    stepper = STEPPERS.get(model.config.arch)(model, ids, torch.ones_like(ids), pad_id, False)
    for token in prefix:
        stepper.append(torch.tensor([token]))
    return stepper.next_logits()[0].log_softmax(-1)


def _path_logprobs(model, source: list[int], tokens: list[int], pad_id: int) -> list[torch.Tensor]:
    """log p(next | prefix) (V,) for every prefix tokens[:0] .. tokens[:-1] of one hypothesis: one
    teacher-forced forward, or the stepper per prefix once the sequence outgrows a fixed position window
    (then decoding saw cropped windows, and so must this)."""
    window = model.positions.max_positions
    length = max(len(source), len(tokens)) if model.is_encoder_decoder else len(source) + len(tokens) - 1
    if window is not None and length > window:
        return [_next_logprobs(model, source, tokens[:i], pad_id) for i in range(len(tokens))]
    src = torch.tensor([source])
    if model.is_encoder_decoder:
        dec = torch.tensor([[model.config.start_id] + tokens[:-1]])
        logits = model(src, decoder_input_ids=dec).logits[0]  # (n, V)
    else:
        logits = model(torch.tensor([source + tokens[:-1]])).logits[0, len(source) - 1:]  # (n, V)
    return list(logits.float().log_softmax(-1))


def beam_tree(
    model,
    source: list[int],
    *,
    label: Callable[[int], str],
    num_beams: int = 3,
    max_new_tokens: int = 8,
    eos_ids: Sequence[int] | None = None,
    length_penalty: float = 1.0,
    alternatives: int | None = None,
    use_cache: bool = True,
) -> dict[str, Any]:
    """Greedy and `num_beams`-beam hypotheses for `source` (decoder: the prompt; encoder-decoder: the
    source sentence) merged into one prefix tree. Nodes carry token, label, log p, cumulative log p and the
    hypotheses passing through them; `alternatives` (default num_beams) untaken children per expanded node.
    `use_cache` goes to generate (the per-node log-probabilities are always computed without a cache)."""
    mcfg = model.config
    eos = list(eos_ids) if eos_ids is not None else [mcfg.eos_id]
    common = dict(max_new_tokens=max_new_tokens, eos_token_id=eos, return_dict=True, use_cache=use_cache)
    greedy = generate(model, [source], **common)
    beams = generate(model, [source], num_beams=num_beams, num_return_sequences=num_beams,
                     length_penalty=length_penalty, **common)
    prompt_len = 1 if model.is_encoder_decoder else len(source)  # enc-dec rows begin with the start token
    hypotheses = [{"name": "greedy", "tokens": _new_tokens(greedy.sequences[0].tolist(), prompt_len, eos)}]
    for rank, (row, score) in enumerate(zip(beams.sequences.tolist(), beams.scores.tolist(), strict=True)):
        hypotheses.append({"name": f"beam {rank + 1}", "tokens": _new_tokens(row, prompt_len, eos),
                           "score": score})

    n_alt = num_beams if alternatives is None else alternatives
    nodes: list[dict[str, Any]] = [{"id": 0, "parent": None, "token": None, "depth": 0, "logp": 0.0,
                                    "cum": 0.0, "label": "<start>" if model.is_encoder_decoder else "prompt",
                                    "paths": []}]
    index: dict[tuple[int, ...], int] = {(): 0}
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def logprobs(prefix: tuple[int, ...]) -> torch.Tensor:
        if prefix not in cache:
            cache[prefix] = _next_logprobs(model, source, list(prefix), mcfg.pad_id)
        return cache[prefix]

    def child(prefix: tuple[int, ...], token: int) -> int:
        key = prefix + (token,)
        if key not in index:
            parent = nodes[index[prefix]]
            lp = float(logprobs(prefix)[token])
            index[key] = len(nodes)
            nodes.append({"id": len(nodes), "parent": parent["id"], "token": token, "label": label(token),
                          "depth": parent["depth"] + 1, "logp": lp, "cum": parent["cum"] + lp, "paths": [],
                          "eos": token in eos})
        return index[key]

    with eval_mode(model), torch.inference_mode():
        for h in hypotheses:
            if h["tokens"] and tuple(h["tokens"][:-1]) not in cache:
                rows = _path_logprobs(model, source, h["tokens"], mcfg.pad_id)
                for i, row in enumerate(rows):
                    cache.setdefault(tuple(h["tokens"][:i]), row)
            prefix: tuple[int, ...] = ()
            path = [0]
            for token in h["tokens"]:
                path.append(child(prefix, token))
                prefix += (token,)
            h["nodes"] = path
            h["labels"] = [label(t) for t in h["tokens"]]
            h["sum_logp"] = nodes[path[-1]]["cum"]
            for node_id in path:
                nodes[node_id]["paths"].append(h["name"])
        for prefix in list(cache):  # every prefix whose next-token distribution a hypothesis used
            for token in logprobs(prefix).topk(min(n_alt, mcfg.vocab_size)).indices.tolist():
                child(prefix, token)
    return {"nodes": nodes, "hypotheses": hypotheses, "num_beams": num_beams,
            "max_new_tokens": max_new_tokens, "length_penalty": length_penalty, "eos": eos}
