"""Look inside a model: `python inspect_model.py model=gpt_small text="the cat sat on the mat"`.

Prints the shape trace of one forward pass, the parameter table and FLOPs per token, and writes PNG plots
(attention per layer, mask, cross-attention, positional pattern, dot product vs distance) plus trace.json
to the Hydra run directory (or `out_dir=...`); `html=explorer.html` also writes the interactive, self-contained
explorer page (zoo.inspection.explorer). `ckpt=path` loads a trained model and its tokenizer with
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
from zoo.inspection.explorer import explorer_data, vocab_labeller, write_page

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
    plots: bool = True  # write the PNG pictures and trace.json (plots=false with html=... writes only the page)
    html: str | None = None  # write the interactive explorer page here (one self-contained HTML file)
    html_layers: list[int] | None = None  # layers whose attention the page stores (default: all within html_max_mb)
    html_beams: int = 3  # beam width of the greedy-vs-beam tree
    html_new_tokens: int = 8  # tokens the greedy and beam searches generate
    html_max_mb: float = 4.0  # size budget for attention weights + logits (layers / positions beyond it are left out, said on the page)


ConfigStore.instance().store(name="inspect_model", node=InspectConfig)


def check_html_options(cfg: DictConfig) -> None:
    """The explorer's keys, checked before any model is built or loaded."""
    if cfg.html is not None and (not str(cfg.html).strip() or Path(cfg.html).is_dir()):
        raise ValueError(f"html={cfg.html!r} must name the HTML file to write (e.g. html=explorer.html), not a folder.")
    for key in ("html_beams", "html_new_tokens"):
        if cfg[key] < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {cfg[key]!r}.")
    if not cfg.html_max_mb > 0:
        raise ValueError(f"html_max_mb must be a size in MB > 0, got {cfg.html_max_mb!r}.")
    if cfg.html_layers is not None and any(i < 0 for i in cfg.html_layers):
        raise ValueError(f"html_layers={list(cfg.html_layers)} must hold layer indices >= 0.")


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
    """(model, encode, source, tokenizer) where encode(text) -> (ids, labels); from a checkpoint (with its
    tokenizer) or a fresh preset (tokenizer None)."""
    if cfg.ckpt:
        model, tokenizer = zoo.load(cfg.ckpt)

        def encode(text: str) -> tuple[list[int], list[str]]:
            ids = tokenizer.encode(text)
            return ids, token_labels(ids, tokenizer)

        return model, encode, f"checkpoint {cfg.ckpt} with its tokenizer", tokenizer
    torch.manual_seed(cfg.seed)
    model = zoo.build(cfg.model)
    return model, lambda text: word_ids(text, model.config.vocab_size), (
        "freshly initialised model (untrained), ad-hoc word ids: NO tokenizer (each distinct word = one id)"
    ), None


def inspect(cfg: DictConfig, out_dir: Path, console: Console) -> list[Path]:
    """Print the trace, parameter and FLOP tables; write the plots and the explorer page. Returns the files."""
    check_html_options(cfg)
    model, encode, source, tokenizer = load_model(cfg)
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

    files = write_plots(cfg, model, tr, (ids_t, labels, dec_labels), kwargs, out_dir) if cfg.plots else []
    if cfg.plots:
        console.print(f"wrote {len(files)} PNG files and trace.json to {out_dir}")
    if cfg.html:
        page = write_explorer(cfg, model, tokenizer, (ids, labels), dec_labels, kwargs, source)
        console.print(f"wrote the explorer page {page} ({page.stat().st_size / 1e6:.2f} MB)")
        files.append(page)
    return files


def write_plots(cfg: DictConfig, model, tr, inputs: tuple[torch.Tensor, list[str], list[str] | None],
                kwargs: dict[str, Any], out_dir: Path) -> list[Path]:
    """trace.json and the PNG pictures (attention per layer, masks, positional pattern, dot vs distance)."""
    ids_t, labels, dec_labels = inputs
    mcfg = model.config
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
    return files


def write_explorer(cfg: DictConfig, model, tokenizer, encoded: tuple[list[int], list[str]],
                   dec_labels: list[str] | None, kwargs: dict[str, Any], source: str) -> Path:
    """The interactive page for the same input; without a tokenizer, vocabulary labels are the ad-hoc words."""
    ids, labels = encoded
    names = None if tokenizer is not None else dict(zip(ids, labels, strict=True))
    label = vocab_labeller(tokenizer, names)
    dec = kwargs.get("decoder_input_ids")
    if tokenizer is not None:  # whole characters (byte-level BPE pieces of Korean decode to text), spaces as ·
        labels = [label(i) for i in ids]
        dec_labels = [label(i) for i in dec[0].tolist()] if dec is not None else None
    data = explorer_data(
        model, ids, tokens=labels, vocab_label=label, decoder_ids=dec[0].tolist() if dec is not None else None,
        decoder_tokens=dec_labels,
        eos_ids=[tokenizer.eos_id] if tokenizer is not None else None,
        layers=list(cfg.html_layers) if cfg.html_layers is not None else None, num_beams=cfg.html_beams,
        max_new_tokens=cfg.html_new_tokens, n_positions=cfg.n_positions, max_mb=cfg.html_max_mb,
        title=f"zoo explorer: {cfg.ckpt or model.config.arch}", source=f"{source}; text: {cfg.text!r}",
    )
    return write_page(data, Path(cfg.html))


@hydra.main(config_path="conf", config_name="inspect_model", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out_dir = Path(cfg.out_dir) if cfg.out_dir else Path(HydraConfig.get().runtime.output_dir)
    inspect(cfg, out_dir, Console(width=140))


if __name__ == "__main__":
    main()
