"""Look inside a model: `python inspect_model.py model=gpt_small text="the cat sat on the mat"`.

Prints the shape trace of one forward pass, the parameter table and FLOPs per token, and writes PNG plots
(attention per layer, mask, cross-attention, positional pattern, dot product vs distance) plus trace.json
to the Hydra run directory (or `out_dir=...`); `html=explorer.html` also writes the interactive,
self-contained explorer page (zoo.inspection.explorer). `ckpt=path` loads a trained model and its tokenizer
with `zoo.load`; without one the model is freshly initialised and the text is mapped to ad-hoc word ids (each
distinct whitespace-separated word gets its own id): no tokenizer is involved and the output says so."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import MISSING, DictConfig

from zoo.training.heap import import_checkpoint_opening, imports_frozen

with imports_frozen(__name__ == "__main__"):  # the script's own process only; an importer's heap is its own
    import torch

    if __name__ == "__main__" and any(a.startswith("ckpt=") for a in sys.argv[1:]):
        import_checkpoint_opening()  # a fresh model's run never imports it: there it costs more than it saves
    from rich.console import Console

    import zoo
    import zoo.hydra_schema  # noqa: F401  (registers model/_schema for the presets)
    from zoo.apps import literal_overrides, open_model
    from zoo.checkpoint import CheckpointError
    from zoo.inspection import attention_maps, flops_table, parameter_table, plots, trace
    from zoo.inspection.attention import token_labels
    from zoo.inspection.explorer import explorer_data, vocab_labeller, write_page
    from zoo.inspection.explorer.budget import PageBudgetError
    from zoo.inspection.explorer.page import PAGE_OUTPUT
    from zoo.inspection.written import PLOTS_OUTPUT
    from zoo.outputs import OutputError

TEXT_KEYS = ("text", "target", "ckpt", "out_dir", "html")  # taken as typed from the shell (literal_overrides)
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
    plots: bool = True  # write the PNG pictures and trace.json
                        # (plots=false with html=... writes only the page)
    html: str | None = None  # write the interactive explorer page here (one self-contained HTML file)
    html_layers: list[int] | None = None  # layers whose attention the page stores
                                          # (default: all within html_max_mb)
    html_beams: int = 3  # beam width of the greedy-vs-beam tree
    html_new_tokens: int = 8  # tokens the greedy and beam searches generate
    html_max_mb: float = 4.0  # cap on the page file (attention layers / heads, logit
                              # positions, masks beyond it are left out, said on the page)


ConfigStore.instance().store(name="inspect_model", node=InspectConfig)


class InspectError(ValueError):
    """A bad inspect_model.py input: the script prints it as one `error: ...` line and exits with code 1."""


def _folder_in_the_way(path: Path) -> Path | None:
    """The nearest existing ancestor of `path` when it is not a folder (the page could not be written)."""
    parent = next((p for p in path.parents if p.exists()), None)
    return parent if parent is not None and not parent.is_dir() else None


def check_options(cfg: DictConfig) -> None:
    """Every key that needs no model, checked before any model is built or loaded."""
    if not str(cfg.text).strip():
        raise InspectError('text is empty; give at least one word, e.g. "text=the cat sat".')
    if cfg.html is not None:
        page = Path(str(cfg.html))
        if not str(cfg.html).strip() or page.is_dir():
            raise InspectError(f"html={cfg.html!r} must name the HTML file to write "
                               f"(e.g. html=explorer.html), not a folder.")
        if (blocker := _folder_in_the_way(page)) is not None:
            raise InspectError(f"html={cfg.html!r}: {blocker} is a file, "
                               "so the page cannot be written under it.")
        try:
            PAGE_OUTPUT.check(page)  # a new file or an earlier page, never a user's file
        except OutputError as e:
            raise InspectError(str(e)) from None
    for key in ("html_beams", "html_new_tokens", "max_heads", "n_positions"):
        if cfg[key] < 1:
            raise InspectError(f"{key} must be an integer >= 1, got {cfg[key]!r}.")
    if not cfg.html_max_mb > 0:
        raise InspectError(f"html_max_mb must be a size in MB > 0, got {cfg.html_max_mb!r}.")
    for key in ("layers", "html_layers"):
        if cfg[key] is not None and any(i < 0 for i in cfg[key]):
            raise InspectError(f"{key}={list(cfg[key])} must hold layer indices >= 0.")


def check_input(model, ids: list[int], dec_ids: list[int] | None, cfg: DictConfig) -> None:
    """The encoded text against the model, before any forward: tokens to show, positions its scheme covers
    (learned positions stop at max_seq_len), and html_layers within every attention stack."""
    if not ids:
        raise InspectError(f"text={cfg.text!r} encodes to no tokens with "
                           "the checkpoint's tokenizer; give other text.")
    if model.is_encoder_decoder:
        spans = [(model.src_embed, len(ids), "text"),
                 (model.tgt_embed, len(dec_ids) + 1, "target (with <start>)")]
    else:
        spans = [(model.embed, len(ids), "text")]
    for embed, length, name in spans:
        try:
            embed.positional.check_span(0, length, name)
        except ValueError as e:
            raise InspectError(str(e)) from None
    if cfg.html and cfg.html_layers is not None:
        mcfg = model.config
        stacks = ([mcfg.n_encoder_layers, mcfg.n_decoder_layers] if model.is_encoder_decoder
                  else [mcfg.n_layers])
        depth = min((n for n in stacks if n), default=0) if model.transformer else 0
        bad = [i for i in cfg.html_layers if i >= depth]
        if bad:
            raise InspectError(f"html_layers={list(cfg.html_layers)}: the model's attention has layers "
                               f"0..{depth - 1} in every stack; {bad} out of range." if depth else
                               f"html_layers={list(cfg.html_layers)}: arch "
                               f"{mcfg.arch!r} has no attention layers.")


def word_ids(text: str, vocab_size: int) -> tuple[list[int], list[str]]:
    """Fallback without a tokenizer: each distinct whitespace-separated word gets the next free id."""
    words = text.split()
    if not words:
        raise InspectError('text is empty; give at least one word, e.g. "text=the cat sat".')
    table: dict[str, int] = {}
    for w in words:
        table.setdefault(w, FIRST_WORD_ID + len(table) % max(1, vocab_size - FIRST_WORD_ID))
    return [table[w] for w in words], words


def load_model(cfg: DictConfig):
    """(model, encode, source, tokenizer) where encode(text) -> (ids, labels); from a checkpoint (with its
    tokenizer) or a fresh preset (tokenizer None)."""
    if cfg.ckpt:
        model, tokenizer, _ = open_model(cfg.ckpt)  # a training checkpoint (read once) or an export folder

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
    """Print the trace, parameter and FLOP tables; write the plots and the explorer page. Returns the
    files."""
    check_options(cfg)
    if cfg.plots:
        try:  # trace.json and the plots replace only zoo's own files of those names
            PLOTS_OUTPUT.check(out_dir)
        except OutputError as e:
            raise InspectError(str(e)) from None
    model, encode, source, tokenizer = load_model(cfg)
    model.eval()
    mcfg = model.config
    ids, labels = encode(cfg.text)
    dec_ids, dec_labels = encode(cfg.target or cfg.text) if model.is_encoder_decoder else (None, None)
    check_input(model, ids, dec_ids, cfg)
    ids_t = torch.tensor([ids])
    kwargs: dict[str, Any] = {}
    if model.is_encoder_decoder:
        kwargs["decoder_input_ids"] = torch.tensor([[mcfg.start_id] + dec_ids])
        dec_labels = ["<start>"] + dec_labels
    tr = trace(model, ids_t, **kwargs)
    page_data = (explorer(cfg, model, tokenizer, (ids, labels), dec_labels, kwargs, source) if cfg.html
                 else None)
    # (a page that cannot fit refused above)
    console.print(f"[bold]{source}[/bold]; {len(ids)} tokens: {labels}")
    console.print(tr.table(layers=list(cfg.layers), title=f"shape trace (layers {list(cfg.layers)} shown)"))
    console.print(parameter_table(model))
    console.print(flops_table(model, len(ids)))

    files = write_plots(cfg, model, tr, (ids_t, labels, dec_labels), kwargs, out_dir) if cfg.plots else []
    if cfg.plots:
        console.print(f"wrote {len(files)} PNG files and trace.json to {out_dir}")
    if page_data is not None:
        page = write_page(page_data, Path(cfg.html))
        notes = "; see its notes for what was left out" if page_data["notes"] else ""
        console.print(f"wrote the explorer page {page} ({page.stat().st_size / 1e6:.3f} MB of html_max_mb="
                      f"{cfg.html_max_mb:g}{notes})")
        files.append(page)
    return files


def run(cfg: DictConfig, out_dir: Path, console: Console) -> int:
    """`inspect`, with a bad input reported as one `error: ...` line on stderr; returns the exit code."""
    try:
        inspect(cfg, out_dir, console)
    except (InspectError, CheckpointError, PageBudgetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


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
        files.append(plots.plot_mask(mask.tensor[0, 0], out_dir / f"{kind}_{mask.stream}.png",
                                     labels=q_labels, title=f"{mask.stream} {kind.replace('_', ' ')}"))
    drawn = plots.plot_positional_pattern(mcfg, out_dir / "positional.png", n_positions=cfg.n_positions,
                                          module=model.positions)  # the model's own scheme (trained tables)
    files += [drawn] if drawn is not None else []
    files.append(plots.plot_dot_vs_distance(out_dir / "dot_vs_distance.png", dim=mcfg.head_size))
    return files


def explorer(cfg: DictConfig, model, tokenizer, encoded: tuple[list[int], list[str]],
             dec_labels: list[str] | None, kwargs: dict[str, Any], source: str) -> dict[str, Any]:
    """The interactive page's data for the same input, held to html_max_mb; without a tokenizer, vocabulary
    labels are the ad-hoc words."""
    ids, labels = encoded
    names = None if tokenizer is not None else dict(zip(ids, labels, strict=True))
    label = vocab_labeller(tokenizer, names)
    dec = kwargs["decoder_input_ids"][0].tolist() if "decoder_input_ids" in kwargs else None
    # whole characters (byte-level BPE pieces of Korean decode to text), spaces as ·
    if tokenizer is not None:
        labels = [label(i) for i in ids]
        dec_labels = [label(i) for i in dec] if dec is not None else None
    return explorer_data(
        model, ids, tokens=labels, vocab_label=label, decoder_ids=dec, decoder_tokens=dec_labels,
        eos_ids=[tokenizer.eos_id] if tokenizer is not None else None,
        layers=list(cfg.html_layers) if cfg.html_layers is not None else None, num_beams=cfg.html_beams,
        max_new_tokens=cfg.html_new_tokens, n_positions=cfg.n_positions, max_mb=cfg.html_max_mb,
        title=f"zoo explorer: {cfg.ckpt or model.config.arch}", source=f"{source}; text: {cfg.text!r}",
    )


@hydra.main(config_path="conf", config_name="inspect_model", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out_dir = Path(cfg.out_dir) if cfg.out_dir else Path(HydraConfig.get().runtime.output_dir)
    code = run(cfg, out_dir, Console(width=140))
    if code:
        sys.exit(code)


def cli() -> None:
    """The script: the text keys' values as the shell gave them (`text=def f(x): # c`), then Hydra."""
    sys.argv[1:] = literal_overrides(sys.argv[1:], TEXT_KEYS)
    main()


if __name__ == "__main__":
    cli()
