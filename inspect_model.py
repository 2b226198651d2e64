"""Look inside a model: `python inspect_model.py model=gpt_small text="the cat sat on the mat"`.

Prints the shape trace of one forward pass, the parameter table and FLOPs per token, and writes PNG plots
(attention per layer, mask, cross-attention, positional pattern, dot product vs distance) plus trace.json
to the Hydra run directory (or `out_dir=...`). `ckpt=path` loads a trained model and its tokenizer with
`zoo.load`; without one the model is freshly initialised and the text is mapped to ad-hoc word ids (each
distinct whitespace-separated word gets its own id): no tokenizer is involved and the output says so."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import MISSING, DictConfig
from rich.console import Console

import zoo
import zoo.hydra_schema  # noqa: F401  (registers model/_schema for the presets)
from zoo.inspection import attention_maps, flops_table, parameter_table, plots, trace
from zoo.inspection.attention import token_labels

FIRST_WORD_ID = 5  # ids 0-4 are the special tokens <pad> <bos> <eos> <unk> <mask>


@dataclass
class InspectConfig:
    """Command-line keys of inspect_model.py (Hydra `key=value`)."""

    defaults: list[Any] = field(default_factory=lambda: [{"model": "gpt_small"}, "_self_"])
    model: Any = MISSING
    text: str = "the cat sat on the mat because the cat was tired"
    target: str | None = None  # encoder_decoder: decoder text (default: the source text)
    ckpt: str | None = None  # a checkpoint for zoo.load (replaces model=)
    out_dir: str | None = None  # default: the Hydra run directory
    layers: list[int] = field(default_factory=lambda: [0])  # layers shown in the printed trace
    max_heads: int = 8
    n_positions: int = 64
    seed: int = 0


ConfigStore.instance().store(name="inspect_model", node=InspectConfig)


def word_ids(text: str, vocab_size: int) -> tuple[list[int], list[str]]:
    """Fallback without a tokenizer: each distinct whitespace-separated word gets the next free id."""
    words = text.split()
    if not words:
        raise ValueError("text is empty; give at least one word, e.g. text=\"the cat sat\".")
    table: dict[str, int] = {}
    for w in words:
        table.setdefault(w, FIRST_WORD_ID + len(table) % max(1, vocab_size - FIRST_WORD_ID))
    return [table[w] for w in words], words


def load_model(cfg: DictConfig):
    """(model, encode) where encode(text) -> (ids, labels); from a checkpoint or a fresh preset."""
    if cfg.ckpt:
        model, tokenizer = zoo.load(cfg.ckpt)

        def encode(text: str) -> tuple[list[int], list[str]]:
            ids = tokenizer.encode(text)
            return ids, token_labels(ids, tokenizer)

        return model, encode, f"checkpoint {cfg.ckpt} with its tokenizer"
    torch.manual_seed(cfg.seed)
    model = zoo.build(cfg.model)
    return model, lambda text: word_ids(text, model.config.vocab_size), (
        "freshly initialised model (untrained), ad-hoc word ids: NO tokenizer (each distinct word = one id)"
    )


def inspect(cfg: DictConfig, out_dir: Path, console: Console) -> list[Path]:
    """Print the trace, parameter and FLOP tables; write the plots. Returns the files written."""
    model, encode, source = load_model(cfg)
    model.eval()
    mcfg = model.config
    ids, labels = encode(cfg.text)
    ids_t = torch.tensor([ids])
    kwargs: dict[str, Any] = {}
    dec_labels = None
    if model.is_encoder_decoder:
        dec_ids, dec_labels = encode(cfg.target or cfg.text)
        kwargs["decoder_input_ids"] = torch.tensor([[mcfg.start_id] + dec_ids])
        dec_labels = ["<start>"] + dec_labels
    console.print(f"[bold]{source}[/bold]; {len(ids)} tokens: {labels}")
    tr = trace(model, ids_t, **kwargs)
    console.print(tr.table(layers=list(cfg.layers), title=f"shape trace (layers {list(cfg.layers)} shown)"))
    console.print(parameter_table(model))
    console.print(flops_table(model, len(ids)))

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "trace.json").write_text(json.dumps(tr.to_rows(), indent=1))
    maps = attention_maps(model, ids_t, tokens=labels, decoder_tokens=dec_labels, **kwargs)
    files = plots.save_attention_maps(maps, out_dir, max_heads=cfg.max_heads)
    for mask in [*tr.select("mask"), *tr.select("local_mask")]:  # local: the sliding-window layers' band
        q_labels = dec_labels if mask.stream == "decoder" and dec_labels else labels
        kind = "local_mask" if mask.name == "local_mask" else "mask"
        files.append(plots.plot_mask(mask.tensor[0, 0], out_dir / f"{kind}_{mask.stream}.png", labels=q_labels,
                                     title=f"{mask.stream} {kind.replace('_', ' ')}"))
    drawn = plots.plot_positional_pattern(mcfg, out_dir / "positional.png", n_positions=cfg.n_positions,
                                          module=model.positions)  # the model's own scheme (trained tables)
    files += [drawn] if drawn is not None else []
    files.append(plots.plot_dot_vs_distance(out_dir / "dot_vs_distance.png", dim=mcfg.head_size))
    console.print(f"wrote {len(files)} PNG files and trace.json to {out_dir}")
    return files


@hydra.main(config_path="conf", config_name="inspect_model", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out_dir = Path(cfg.out_dir) if cfg.out_dir else Path(HydraConfig.get().runtime.output_dir)
    inspect(cfg, out_dir, Console(width=140))


if __name__ == "__main__":
    main()
