"""What a run prints: progress lines when the output is not a terminal (cluster logs, CI, `| tee`), filters
for third-party messages that tell the user nothing, and the closing summary (where things are, how to go on).

In a terminal the rich bar (callbacks.StepProgressBar) redraws in place; redirected, a bar only shows up at
the end, so `LineProgress` prints one plain line every `every_n_steps` optimizer steps instead. `token_count`
(a batch's real tokens) and `trained_tokens` (those the module's step trained on) feed its tok/s and the
callbacks' `train/tokens_per_s`."""

from __future__ import annotations

import logging
import shlex
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

from zoo.apps import hydra_value
from zoo.training.distributed import data_parallel_world

# Third-party noise, silenced by exact message (and module): real warnings still show.
# Lightning's advertisement for its cloud logger / model registry, logged at INFO on every fit.
LIGHTNING_TIPS = ("💡 Tip: For seamless cloud",)
# the loggers rank_zero_info writes to (lightning.pytorch re-points fabric's on import)
LIGHTNING_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
# torch deprecates LeafSpec; Lightning's own pytree helper still uses it (nothing a zoo user can change).
# Lightning also warns that zoo's module overrides on_before_batch_transfer next to a datamodule: that is the
# intended design (the module range-checks ids on the host), so the warning tells the user nothing. And it
# calls a mid-epoch resume unreliable because zoo's loaders lack Lightning's state_dict interface: zoo
# restores the position itself (samplers keyed by seed and
# epoch, batches trained in the checkpoint; resume tests, 1e-6).
DEPENDENCY_DEPRECATIONS = (
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning,
     r"lightning\.pytorch\.utilities\._pytree"),
    (r"You have overridden `on_before_batch_transfer` in `LightningModule` but have passed in a", UserWarning,
     r"lightning\.pytorch\.trainer\.connectors\.data_connector"),
    (r"You're resuming from a checkpoint that ended before "
     r"the epoch ended and your dataloader is not resumable",
     Warning, r"lightning\.pytorch\.loops\.training_epoch_loop"),
)


class _DropTips(logging.Filter):
    """Drops log records whose message starts with one of LIGHTNING_TIPS."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(LIGHTNING_TIPS)


DROP_TIPS = _DropTips()  # one instance: addFilter adds it to a logger once


def quiet_third_party() -> None:
    """Install the filters above (idempotent): Lightning's tips and the listed dependency deprecations."""
    for name in LIGHTNING_LOGGERS:
        logging.getLogger(name).addFilter(DROP_TIPS)
    for message, category, module in DEPENDENCY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


def token_count(batch: Mapping[str, torch.Tensor]) -> int | torch.Tensor:
    """Real (unpadded) tokens in a batch: encoder/decoder inputs, counted by their attention masks. No host
    sync: a masked batch's count stays a tensor on its device (callbacks sum them and read the sum once)."""
    total: int | torch.Tensor = 0
    for ids_key, mask_key in (("input_ids", "attention_mask"),
                              ("decoder_input_ids", "decoder_attention_mask")):
        if ids_key in batch:
            total = total + (batch[mask_key].sum() if mask_key in batch else batch[ids_key].numel())
    return total


def trained_tokens(pl_module: Any, batch: Mapping[str, torch.Tensor]) -> int | torch.Tensor:
    """Real tokens the step just trained on: what the module counted in its training step (task=grpo: the
    rollouts' prompt + completion tokens, not the prompt batch the loader gave), else the batch's."""
    counted = getattr(pl_module, "trained_tokens", None)
    return token_count(batch) if counted is None else counted


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class LineProgress(ProgressBar):
    """One line every `every_n_steps` optimizer steps:
    `step 200/2000 | loss 2.345 | 12,345 tok/s | 0:41 elapsed, ETA 6:09`, plus a line per validation. Reads
    the loss once per printed line (no per-step host sync); tokens/s counts the batches' tokens since the
    previous line (all processes together)."""

    def __init__(self, every_n_steps: int = 50) -> None:
        super().__init__()
        if every_n_steps < 1:
            raise ValueError(f"callbacks.progress_bar.every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps, self._enabled = every_n_steps, True
        self._start = self._since = 0.0
        self._start_step = self._printed_step = 0
        self._tokens = 0

    # ProgressBar API: Lightning switches bars off on non-zero ranks and while it prints elsewhere
    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self._since = time.perf_counter()
        self._start_step = self._printed_step = trainer.global_step
        self._tokens = 0

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        counted = trained_tokens(pl_module, batch)  # a tensor if masked
        self._tokens = self._tokens + counted * data_parallel_world(trainer)
        step = trainer.global_step
        if not self._enabled or step == self._printed_step or step % self.every_n_steps:
            return
        now = time.perf_counter()
        rate = float(self._tokens) / max(now - self._since, 1e-9)
        per_step = (now - self._start) / max(1, step - self._start_step)
        parts = [f"step {step}/{trainer.max_steps}"]
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            parts.append(f"loss {float(loss.detach()):.4f}")  # the one host sync, once per printed line
        parts.append(f"{rate:,.0f} tok/s")
        timing = f"{_clock(now - self._start)} elapsed"
        if trainer.max_steps and trainer.max_steps > 0:
            timing += f", ETA {_clock(per_step * (trainer.max_steps - step))}"
        print(" | ".join(parts + [timing]), flush=True)
        self._printed_step, self._since, self._tokens = step, now, 0

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._enabled or trainer.sanity_checking:
            return
        shown = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("val/") and v.numel() == 1}
        if shown:
            values = ", ".join(f"{k} {float(v):.4f}" for k, v in sorted(shown.items()))
            print(f"step {trainer.global_step}: {values}", flush=True)
        self._since, self._tokens = time.perf_counter(), 0  # validation time is not training throughput


def summary_lines(result: Any, overrides: list[str] | None = None) -> list[str]:
    """The closing summary of a `TrainResult`: the run folder, checkpoints, the W&B run, the samples, and the
    commands to resume from the last checkpoint and to generate from the best. `overrides`: the command line's
    key=value arguments (repeated in the resume command). Both commands run as printed when pasted into a
    shell."""
    best, last = result.best_checkpoint, result.last_checkpoint
    lines = [f"run folder: {result.output_dir}"]
    if best is not None:
        lines.append(f"  best checkpoint: {best}")
    if last is not None:
        lines.append(f"  last checkpoint: {last}")
    if result.wandb_run:
        lines.append(f"  W&B run:  {result.wandb_run}")
    if result.samples is not None and result.samples.samples:
        lines.append("  samples:  printed above"
                     + (", and logged to W&B as the table 'samples'" if result.wandb_run else ""))
    if last is not None:
        replaced = ("ckpt_path=", "+ckpt_path=") + (("trainer.max_steps=",) if result.finished_at else ())
        kept = [a for a in (overrides or []) if not a.startswith(replaced)]
        if result.finished_at:  # resumed as it was, a finished run trains nothing: the line trains on
            more = 2 * result.finished_at
            lines.append(f"  finished: step {result.finished_at} is trainer.max_steps; the resume line "
                         f"trains on to {more}")
            kept.append(f"trainer.max_steps={more}")
        resume = [*kept, f"ckpt_path={hydra_value(str(last))}"]  # as the shell gives them to Hydra again
        lines.append(f"  resume:   python train.py {' '.join(shlex.quote(a) for a in resume)}")
    if result.generate_with and (best or last):  # generate.py takes text as typed: only the shell quotes
        ckpt = shlex.quote(f"ckpt={best or last}")
        lines.append(f"  generate: python generate.py {ckpt} {result.generate_with}=\"...\"")
    return lines


def wandb_location(logger: Any) -> str | None:
    """The W&B run's URL (online) or local run folder (offline), or None without a W&B run."""
    run = getattr(logger, "_experiment", None) if type(logger).__name__ == "WandbLogger" else None
    if run is None:
        return None
    if not getattr(run, "offline", False) and getattr(run, "url", None):  # an offline run's url warns
        return str(run.url)
    files = getattr(run, "dir", None)  # <run>/wandb/offline-run-*/files
    return str(Path(files).parent) if files else None
