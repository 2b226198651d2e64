"""The hand-written side of the loop section: a 40-line PyTorch training loop, as people write before they
reach for a framework (nanoGPT's train.py). `python bench/minimal_loop.py SPEC.json`.

SPEC (written by bench.bench_loop) names the model config, the data file (the exact train and validation
windows train.py draws, saved once as tensors) and train.py's recipe: AdamW with decay on matrices,
linear warmup then cosine decay, global-norm clipping, validation over the same batches every `eval_every`
steps (dropout re-keyed from the seed at the start of each interval, as train.py's epochs are), a
checkpoint (model + optimizer) written after each validation (`best.pt` when it improved), the
training loss written to a CSV every `log_every` steps. Only torch and `zoo.build` are imported."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from zoo.config import ModelConfig
from zoo.presets import build


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    data = torch.load(spec["data"])
    train_batches, val_batches = data["train"], data["val"]  # lists of {"input_ids", "targets"}
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(spec["seed"])
    model = build(ModelConfig.from_dict(spec["model"]))
    model.train()
    o = spec["optim"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"])
    warmup, max_steps, floor = spec["warmup_steps"], spec["max_steps"], spec["min_lr_ratio"]

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)

    def loss_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = model(batch["input_ids"]).logits  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=-100)

    best, val_loss, log = math.inf, math.nan, open(out / "metrics.csv", "w")
    for step in range(1, max_steps + 1):
        if (step - 1) % spec["eval_every"] == 0:  # train.py re-keys dropout each epoch (= eval interval)
            torch.manual_seed(spec["seed"] * 1_000_003 + (step - 1) // spec["eval_every"])
        loss = loss_of(train_batches[step - 1])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec["clip"])
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % spec["log_every"] == 0:
            log.write(f"{step},{loss.item()}\n")
        if step % spec["eval_every"] == 0 or step == max_steps:
            model.eval()
            with torch.no_grad():
                total = count = 0.0
                for batch in val_batches:
                    n = (batch["targets"] != -100).sum().item()
                    total, count = total + loss_of(batch).item() * n, count + n
            val_loss = total / count
            model.train()
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            torch.save(state, out / "last.pt")
            if val_loss < best:
                best = val_loss
                torch.save(state, out / "best.pt")
            print(f"step {step}: val/loss {val_loss:.4f}", flush=True)
    log.close()
    print(f"  val/loss = {val_loss:.4f}")


if __name__ == "__main__":
    main(sys.argv[1])
