"""What a resume (`ckpt_path=`) must agree with before any work, each refused with the way to do what was
meant: `ckpt_path=last` takes the newest earlier run of this run's architecture and task (not of any model),
a finished run is not resumed into a run that trains nothing, and an LM run keeps its epoch length (an epoch
is one evaluation period and the training batches are keyed by epoch, so another eval_every, batch size or
process count would draw other batches than the run it continues)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.checkpoint import Checkpoint


def an(word: str) -> str:
    """`word` with its indefinite article: "an encoder", "a decoder"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def earlier_checkpoints(runs_dir: Path, output_dir: Path) -> list[Path]:
    """Every earlier run's `checkpoints/last.ckpt` under `runs_dir` (not this run's), the newest first."""
    found = [p for p in runs_dir.glob("**/checkpoints/last.ckpt") if output_dir not in p.parents]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def model_and_task(ckpt: Checkpoint) -> tuple[Any, Any]:
    """(architecture, task) a checkpoint was trained as."""
    return (ckpt.record.model_config or {}).get("arch"), ckpt.record.task


def last_of_this_model(newest: Checkpoint, wanted: tuple[str, str], runs_dir: Path, output_dir: Path,
                       read: Callable[[Path], Checkpoint]) -> Checkpoint:
    """`ckpt_path=last`: the newest earlier run's checkpoint of the (architecture, task) `wanted`. `newest`
    (the newest of all, already read) is not read again; older ones are read, one at a time, only while none
    matched. ValueError naming every checkpoint found and what it holds when none matches."""
    found = []
    for path in earlier_checkpoints(runs_dir, output_dir):
        ckpt = newest if path == newest.path else read(path)
        arch, task = model_and_task(ckpt)
        if (arch, task) == wanted:
            return ckpt
        found.append(f"{path} ({an(str(arch))} model, task {task})")
    raise ValueError(f"no earlier run under {runs_dir} holds {an(wanted[0])} model trained on task "
                     f"{wanted[1]}; it found: {', '.join(found)}; name a checkpoint with ckpt_path=<file>")


def check_unfinished(ckpt: Checkpoint, max_steps: int) -> None:
    """A checkpoint at or past `trainer.max_steps` would resume into a run that trains nothing: ValueError
    saying so and how to train on."""
    step = ckpt.data.get("global_step")
    if step is not None and step >= max_steps:
        raise ValueError(f"the run of checkpoint {ckpt.path} is finished: it is at step {step} and "
                         f"trainer.max_steps={max_steps}, so nothing would train. To train on, resume with a "
                         f"larger trainer.max_steps (e.g. trainer.max_steps={2 * step})")


def check_same_epochs(ckpt: Checkpoint, state_key: str, blocks: int | None, resolved: dict[str, Any],
                      accumulate: int) -> None:
    """The data module's epoch length (`blocks` training windows; None: an epoch is one pass over the data)
    is the checkpoint's (its data module state under `state_key`, recorded since zoo wrote it): ValueError
    naming the key that sets it, this run's value and the checkpoint's otherwise."""
    saved = (ckpt.data.get(state_key) or {}).get("blocks_per_epoch")
    if saved is None or blocks is None or saved == blocks:
        return
    way_out = f"or start a new run from its weights with init_from={ckpt.path}"
    given = (resolved.get("data") or {}).get("blocks_per_epoch")
    if given is not None:
        raise ValueError(f"data.blocks_per_epoch={given}, the checkpoint's run drew {saved} training windows "
                         "per epoch: batches are keyed by epoch, so the resumed run would train on other "
                         f"batches than the run it continues. Resume with data.blocks_per_epoch={saved}, "
                         f"{way_out}")
    every, batch = resolved["eval_every"], resolved["batch_size"]
    per_step = batch * accumulate * (blocks // (every * batch * accumulate))  # windows per optimizer step
    theirs = f"eval_every={saved // per_step}" if saved % per_step == 0 else None
    raise ValueError(
        f"eval_every={every} makes an epoch of {blocks} training windows (eval_every x batch_size x "
        f"trainer.accumulate_grad_batches x processes = {every} x {batch} x {accumulate} x "
        f"{per_step // (batch * accumulate)}), the checkpoint's run drew {saved} per epoch "
        f"({theirs or 'no eval_every gives it'} at this batch size): an LM epoch is one evaluation period "
        "and its batches are keyed by epoch, so the resumed run would train on other batches than the run it "
        f"continues. Resume with {theirs or 'the eval_every, batch_size and devices it trained with'}, "
        f"{way_out}")
