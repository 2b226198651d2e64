"""Run a training script under a clock: `python -m bench.loop_probe OUT.json SCRIPT [ARGS...]` runs SCRIPT as
`__main__` and writes to OUT.json when it exits the wall-clock time (time.time()) of every optimizer step,
every evaluation window and every torch.save, and the process's CPU time (time.process_time(), from process
start) at every optimizer step and evaluation window's ends: on a shared machine wall-clock grows with the
neighbours' load, a process's CPU time much less. The same probe wraps train.py and the minimal loop, so both
sides are timed by one mechanism:

- an optimizer step: torch's global step post-hook (`register_optimizer_step_post_hook`);
- an evaluation window: an outermost `Module.eval()` call to the next forward of a module in training mode
  (Lightning restores training mode by setting flags, not by calling train(), so the window closes at the
  next training forward; it holds the validation, its checkpoints and the metrics' logging);
- a checkpoint: each `torch.save` call.

The probe imports torch before the script does; both sides need torch before their first step, so the time
to the first step is unchanged."""

from __future__ import annotations

import atexit
import json
import runpy
import sys
import time


def main() -> None:
    out, script, *args = sys.argv[1:]
    import torch

    steps: list[float] = []
    cpu_steps: list[float] = []  # process CPU seconds at each step
    windows: list[tuple[float, float]] = []  # evaluation windows (start, end)
    cpu_windows: list[tuple[float, float]] = []  # the same windows in process CPU seconds
    saves: list[tuple[float, float]] = []  # (start, end)
    cpu_saves: list[tuple[float, float]] = []
    state = {"depth": 0, "eval_since": None, "cpu_since": None}
    train = torch.nn.Module.train
    save = torch.save

    def timed_train(self, mode: bool = True):
        state["depth"] += 1
        try:
            return train(self, mode)
        finally:
            state["depth"] -= 1
            if state["depth"] == 0 and not mode and state["eval_since"] is None:
                state["eval_since"], state["cpu_since"] = time.time(), time.process_time()

    def close_window(module, args) -> None:
        if module.training and state["eval_since"] is not None:
            windows.append((state["eval_since"], time.time()))
            cpu_windows.append((state["cpu_since"], time.process_time()))
            state["eval_since"] = None

    def timed_save(*a, **k):
        start, cpu_start = time.time(), time.process_time()
        try:
            return save(*a, **k)
        finally:
            saves.append((start, time.time()))
            cpu_saves.append((cpu_start, time.process_time()))

    torch.nn.Module.train = timed_train
    torch.save = timed_save
    torch.nn.modules.module.register_module_forward_pre_hook(close_window)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def stepped(*_) -> None:
        steps.append(time.time())
        cpu_steps.append(time.process_time())

    register_optimizer_step_post_hook(stepped)

    def dump() -> None:
        with open(out, "w") as f:
            end, cpu_end = time.time(), time.process_time()
            if state["eval_since"] is not None:  # the last evaluation ran to the end of the process
                windows.append((state["eval_since"], end))
                cpu_windows.append((state["cpu_since"], cpu_end))
            json.dump({"steps": steps, "windows": windows, "saves": saves, "end": end, "cpu_steps": cpu_steps,
                       "cpu_windows": cpu_windows, "cpu_saves": cpu_saves, "cpu_end": cpu_end}, f)

    atexit.register(dump)
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
