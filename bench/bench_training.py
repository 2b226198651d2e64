"""Training throughput (tokens/s): zoo through the training app's Lightning path vs the same zoo model in a
bare PyTorch loop vs the Hugging Face model of the same shape in a bare loop.

Every side runs train.py's optimizer settings (the training app's `build_optimizer`: AdamW, decay on
matrices) and its gradient clipping on the same random batch. For an encoder-decoder a "token" is a
(source, target) pair with both sequences of length T (as `zoo.inspection.counts` counts FLOPs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

import zoo
from bench.common import Section, goal, interleaved, markdown_table, step_loop, top_ops, top_ops_table
from bench.lightning_path import lightning_step, train_config
from bench.references import hf_like, parameter_count
from zoo.config import ModelConfig
from zoo.training.optim import build_optimizer

TRAIN_CFG = train_config()  # train.py's defaults with trainer=cpu
OPTIM = TRAIN_CFG["optim"]
CLIP = TRAIN_CFG["trainer"].get("gradient_clip_val")


@dataclass(frozen=True)
class Shape:
    """One benchmarked model: preset + overrides, batch size and sequence length."""

    preset: str
    batch: int
    seq_len: int
    overrides: tuple[tuple[str, object], ...] = ()
    lightning_goal: float = 0.95  # train.py path / bare loop tokens/s
    name: str = ""  # short label for the goals table (default: the preset)

    @property
    def label(self) -> str:
        return self.name or self.preset

    def config(self) -> ModelConfig:
        return zoo.resolve_config(self.preset, **dict(self.overrides))

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    def describe(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.overrides)
        return f"`{self.preset}`{' (' + extra + ')' if extra else ''}, B={self.batch}, T={self.seq_len}"


# issue 15's small shape: ~0.8M parameters (4 layers, d=128, T=64, batch 12, a char-level vocabulary), where
# the per-step framework overhead shows most; train.py must keep >= 0.97 of the bare loop's speed there
SMALL = Shape("gpt_small", 12, 64, (("n_layers", 4), ("d_model", 128), ("n_heads", 4), ("max_seq_len", 64),
                                    ("vocab_size", 96)), lightning_goal=0.97, name="gpt 0.8M")

SHAPES = {
    False: [Shape("gpt_small", 4, 128), Shape("transformer_tiny", 16, 64)],
    True: [  # --quick: checks the runner end to end, numbers are not the benchmark
        Shape("gpt_small", 2, 16, (("n_layers", 1), ("d_model", 64), ("n_heads", 2), ("vocab_size", 256))),
        Shape("transformer_tiny", 2, 16,
              (("n_layers", 1), ("d_model", 32), ("d_ff", 64), ("vocab_size", 128))),
    ],
}
TRAINING_SHAPES = {False: [SMALL, *SHAPES[False]], True: SHAPES[True]}  # the MFU section keeps SHAPES


def random_batch(cfg: ModelConfig, batch: int, seq_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """HF-named training batch: `input_ids` + `labels` (decoder), plus `decoder_input_ids` (seq2seq)."""
    gen = torch.Generator().manual_seed(seed)
    low = 3  # skip pad / bos / eos
    ids = torch.randint(low, cfg.vocab_size, (batch, seq_len), generator=gen)
    if cfg.arch == "decoder":
        return {"input_ids": ids, "labels": ids.clone()}
    target = torch.randint(low, cfg.vocab_size, (batch, seq_len), generator=gen)
    decoder_input = torch.cat([torch.full((batch, 1), cfg.start_id), target[:, :-1]], dim=1)
    return {"input_ids": ids, "decoder_input_ids": decoder_input, "labels": target}


def bare_step(model: torch.nn.Module, batch: dict[str, torch.Tensor], steps: int = 1) -> Callable[[], float]:
    """A closure running `steps` forward/backward/clip/AdamW steps in a plain PyTorch loop; returns the
    loss."""
    model.train()
    optimizer = build_optimizer(model, OPTIM)

    return step_loop(lambda: model(**batch).loss, model, optimizer, steps, CLIP)


def training_sides(shape: Shape, *, steps: int = 1) -> dict[str, Callable[[], object]]:
    """Closures running `steps` training steps of each side, built from one config and one batch."""
    cfg = shape.config()
    batch = random_batch(cfg, shape.batch, shape.seq_len)
    torch.manual_seed(0)
    model = zoo.build(cfg)
    torch.manual_seed(0)
    hf = hf_like(cfg)
    if parameter_count(model) != parameter_count(hf):
        raise ValueError(
            f"{shape.preset}: zoo has {parameter_count(model):,} parameters but the HF reference has "
            f"{parameter_count(hf):,}; the shapes differ."
        )
    torch.manual_seed(0)
    sides: dict[str, Callable[[], object]] = {
        "zoo Lightning": lightning_step(zoo.build(cfg), batch, TRAIN_CFG, steps=steps)}
    sides["zoo bare"] = bare_step(model, batch, steps)
    sides["HF bare"] = bare_step(hf, batch, steps)
    return sides


def measure(quick: bool = False) -> list[dict]:
    """tokens/s of each side for every shape; raw rows for this section and the MFU section."""
    # several steps per timed call: a one-step window through Trainer.fit also catches the end-of-fit work
    # of its last step (measured: 0.94x at 1 step vs 0.99x at 8 steps for gpt_small, same code)
    warmup, repeats, steps = (1, 2, 1) if quick else (1, 4, 6)
    rows = []
    for shape in TRAINING_SHAPES[quick]:
        sides = training_sides(shape, steps=steps)
        timings = interleaved(sides, warmup=warmup, repeats=repeats)
        tps = {name: steps * shape.tokens / t.median for name, t in timings.items()}
        missed = set()  # goals missed: profile the sides involved (where does each spend its time?)
        if tps["zoo bare"] < tps["HF bare"]:
            missed |= {"zoo bare", "HF bare"}
        if tps["zoo Lightning"] < shape.lightning_goal * tps["zoo bare"]:
            missed |= {"zoo Lightning", "zoo bare"}
        profiles = {name: top_ops(sides[name]) for name in sides if name in missed}
        rows.append({"shape": shape, "tokens_per_s": tps, "spread": {n: t.spread for n, t in timings.items()},
                     "profiles": profiles})
    return rows


def section(rows: list[dict]) -> Section:
    """Markdown table: tokens/s per side and the two ratios the goals are about."""
    headers = ["model (shape)", "zoo Lightning tok/s", "zoo bare tok/s", "HF bare tok/s",
               "Lightning / bare (goal >= 0.95; 0.97 at 0.8M)", "zoo bare / HF bare (goal >= 1.0)"]
    table_rows, notes, goals = [], [], []
    for r in rows:
        tps, name = r["tokens_per_s"], r["shape"].describe()
        lit, vs_hf = tps["zoo Lightning"] / tps["zoo bare"], tps["zoo bare"] / tps["HF bare"]
        table_rows.append([
            name, f"{tps['zoo Lightning']:,.0f}", f"{tps['zoo bare']:,.0f}", f"{tps['HF bare']:,.0f}",
            f"{lit:.2f} ({goal(lit, r['shape'].lightning_goal)})", f"{vs_hf:.2f} ({goal(vs_hf, 1.0)})",
        ])
        goals += [(f"training {r['shape'].label}: Lightning / bare loop", lit, r["shape"].lightning_goal),
                  (f"training {r['shape'].preset}: zoo / HF (bare loops)", vs_hf, 1.0)]
        noisy = [f"{k} {v:.0%}" for k, v in r["spread"].items()]
        notes.append(f"{name}: spread (max-min)/median of the timed steps: {', '.join(noisy)}.")
    notes.append(
        "Every side: train.py's optimizer (`zoo.training.optim.build_optimizer` with the default `optim`: "
        f"AdamW, lr {OPTIM['lr']}, weight decay {OPTIM['weight_decay']} on matrices), gradient clipping at "
        f"{CLIP}, the same random batch, the presets' dropout (0.1), fp32. The Lightning side is "
        "`ZooLightningModule` + `trainer_kwargs(trainer=cpu)` + the per-step callbacks "
        "(the progress display train.py picks for this stdout: the rich bar in a terminal, a line every 50 "
        "steps otherwise; tokens/s; non-finite stop), cosine schedule; W&B logger, validation and "
        "checkpoints are off (not per-step costs).")
    notes.append("HF references: `GPT2LMHeadModel` for gpt_small (activation set to exact GELU like the "
                 "preset), `MarianMTModel` for transformer_tiny (post-LN, sinusoidal, scaled shared "
                 "embeddings); both with SDPA attention and the same parameter count as the zoo model "
                 "(checked in the run).")
    for r in rows:
        for side, ops in r["profiles"].items():
            what = "2 steps through `Trainer.fit`, set-up included" if side == "zoo Lightning" else "one step"
            notes.append(f"Goal missed for {r['shape'].describe()}: top ops of {side} "
                         f"({what}; torch.profiler):\n\n"
                         + "\n".join("  " + line for line in top_ops_table(ops).splitlines()))
    return Section("Training throughput", markdown_table(headers, table_rows), notes, {"rows": rows}, goals)


def run(quick: bool = False) -> Section:
    return section(measure(quick))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).markdown())
