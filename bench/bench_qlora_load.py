"""The load of finetune=qlora with init_from, before and after the lean load (zoo/finetune/lean.py): the peak
memory of turning a pretrained folder into the QLoRA model, for a zoo checkpoint and a Hugging Face folder of
a SmolLM2-135M shape (random weights, ~540 MB of fp32, written to a temporary folder first).

- eager: as zoo loaded before the lean load: the checkpoint read whole and loaded into a model by zoo.loader
  (a HF folder: its converted state dict), the run's float model built and loaded, then quantised.
- lean: train.py's path now (read_init, build_model): a checkpoint mapped, the model on the meta device,
  each linear layer quantised as it arrives.

Each load runs in fresh processes (imports done first), measured three ways: the highest running sum of
torch's CPU allocations (torch.profiler, in a process of its own since its buffers take resident memory:
deterministic; it counts a mapped file's tensors whole), the process's peak resident set above what it held
before the load (VmHWM after /proc/self/clear_refs: it counts a mapped file's pages once touched, which are
clean page cache the kernel can drop), and the peak of its anonymous resident memory (RssAnon, sampled every
millisecond by a thread: memory that only freeing returns)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

import zoo
from bench.bench_qlora import peak_during
from bench.common import markdown_table

SIZES = {False: {"preset": "smollm2_135m", "block_size": 64}, True: {"preset": "gpt_nano", "block_size": 32}}
SIDES = ("eager", "lean")
SOURCES = {"zoo checkpoint": "model.ckpt", "Hugging Face folder": "hf"}
MB = 2**20


def write_sources(folder: Path, quick: bool) -> dict:
    """A zoo checkpoint file and a HF folder of the size's preset with random weights (seed 0)."""
    from zoo.checkpoint import atomic_torch_save, zoo_section
    from zoo.tokenizers import TOKENIZERS

    torch.manual_seed(0)
    model = zoo.build(SIZES[quick]["preset"])
    tokenizer = TOKENIZERS["char"](["def add(a, b):\n    return a + b\n"])
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": zoo_section(model.config, "lm", tokenizer)}, folder / SOURCES["zoo checkpoint"])
    zoo.save_pretrained(model, folder / SOURCES["Hugging Face folder"])
    linears = sum(m.weight.numel() for n, m in model.named_modules()
                  if type(m) is torch.nn.Linear and not n.startswith("head"))
    return {"params": sum(p.numel() for p in model.parameters()), "linear_params": linears,
            "fp32_mb": sum(p.numel() * 4 for p in model.parameters()) / MB}  # a tied table once


def finetune_cfg(quick: bool) -> dict:
    return {"name": "qlora", "rank": 8, "alpha": 16.0, "block_size": SIZES[quick]["block_size"]}


def eager_load(kind: str, path: str, cfg: dict):
    """The load as zoo made it before the lean load (every object the run kept alive is returned)."""
    from zoo.checkpoint import Checkpoint
    from zoo.finetune.init_from import build_initialised, load_state, open_source
    from zoo.finetune.methods import apply_finetune
    from zoo.loader import from_checkpoint

    if kind == "zoo checkpoint":
        ckpt = Checkpoint.read(path)  # read whole at plan time (ZooCheckpoint.checkpoint)
        loaded, _ = from_checkpoint(ckpt)  # ZooCheckpoint.loaded, kept by the source for the run
        del ckpt
        state, config, family = loaded.state_dict(), loaded.config, None
    else:
        source = open_source(path)
        loaded, state, config = None, load_state(source, path), source.config()
        family = source.model_type
    model, fresh = build_initialised(config, state, path, family)
    del state
    apply_finetune(model, cfg, fresh)
    return model, loaded


def lean_load(kind: str, path: str, cfg: dict):
    """train.py's load now: read_init's weights, then build_model (zoo.finetune.setup)."""
    from zoo.finetune.init_from import load_state, open_source
    from zoo.finetune.setup import InitPlan, build_model

    source = open_source(path)
    init = InitPlan(path, source, source.config(), True, [])
    model, applied = build_model(init, load_state(source, path, lean=True), source.config(), cfg)
    assert "loaded layer by layer" in applied.description, applied.description
    return model, source


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def measure(side: str, kind: str, folder: str, quick: bool, profiled: bool) -> dict:
    """In a fresh process: one load, its resident peak and sampled anonymous peak, or (`profiled`) its
    allocation peak (the profiler's own buffers would count in the resident set)."""
    from zoo.modules.qlora import bitsandbytes

    bitsandbytes()  # its import (pages, kernels) before the baseline
    path = str(Path(folder) / SOURCES[kind])
    load = eager_load if side == "eager" else lean_load
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    base_rss, base_anon = _status("VmRSS"), _status("RssAnon")
    peak_anon, done = [base_anon], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak_anon[0] = max(peak_anon[0], _status("RssAnon"))
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    kept: list = []
    start = time.perf_counter()
    sampler.start()
    if profiled:
        allocated = peak_during(lambda: kept.append(load(kind, path, finetune_cfg(quick))))
    else:
        allocated, _ = 0, kept.append(load(kind, path, finetune_cfg(quick)))
    done.set()
    sampler.join()
    seconds = time.perf_counter() - start
    model = kept[0][0]
    held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for t in [*model.parameters(), *model.buffers()]}
    return {"allocated_peak": allocated, "rss_peak": _status("VmHWM") - base_rss,
            "anon_peak": max(peak_anon[0], _status("RssAnon")) - base_anon,
            "anon_after": _status("RssAnon") - base_anon, "held": sum(held.values()), "seconds": seconds}


def in_fresh_process(jobs: list[tuple[str, str, bool]], folder: Path, quick: bool) -> list[dict]:
    """The measurements `jobs` ((side, source, profiled) each) one after another in one fresh process."""
    args = [sys.executable, "-m", "bench.bench_qlora_load", "--folder", str(folder),
            *(["--quick"] if quick else [])]
    for side, kind, profiled in jobs:
        args += ["--measure", json.dumps([side, kind, profiled])]
    out = subprocess.run(args, capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_load(quick: bool = False) -> tuple[str, list[str], dict]:
    """(markdown table, notes, data) of both sides for both sources, each load in its own process (--quick:
    all in one)."""
    with tempfile.TemporaryDirectory(prefix="qlora_load_") as tmp:
        sizes = write_sources(Path(tmp), quick)
        # each side's resident measurements from one process, its allocation peak from another; --quick
        # runs them all in one process, one after another (a child's imports cost more than its loads)
        jobs = [(side, kind, profiled) for kind in SOURCES for side in SIDES for profiled in (False, True)]
        batches = [jobs] if quick else [[job] for job in jobs]
        measured = [m for batch in batches for m in in_fresh_process(batch, Path(tmp), quick)]
    results: dict = {kind: {side: {} for side in SIDES} for kind in SOURCES}
    for (side, kind, profiled), m in zip(jobs, measured, strict=True):
        results[kind][side].update({"allocated_peak": m["allocated_peak"]} if profiled else m)
    rows = []
    for kind, sides in results.items():
        for side in SIDES:
            r, e = sides[side], sides["eager"]
            rows.append([kind, side, f"{r['allocated_peak'] / MB:,.0f}",
                         f"{r['allocated_peak'] / e['allocated_peak']:.2f}", f"{r['rss_peak'] / MB:,.0f}",
                         f"{r['anon_peak'] / MB:,.0f}", f"{r['anon_peak'] / e['anon_peak']:.2f}",
                         f"{r['held'] / MB:,.0f}", f"{r['seconds']:.1f}"])
    table = markdown_table(["init_from", "load", "torch allocation peak MB", "vs eager",
                            "process peak RSS MB", "peak anonymous RSS MB", "vs eager", "model holds MB",
                            "load s"], rows)
    preset = SIZES[quick]["preset"]
    notes = [
        f"Loading init_from for finetune=qlora (bench/bench_qlora_load.py): a {preset} shape "
        f"({sizes['params'] / 1e6:,.0f}M parameters, {sizes['fp32_mb']:,.0f} MB of fp32 weights, random, "
        f"seed 0) saved as a zoo checkpoint and as a HF folder; every linear layer of the blocks "
        f"({sizes['linear_params'] / 1e6:,.0f}M weights) held in NF4 (block size "
        f"{SIZES[quick]['block_size']}), the tied embeddings and the norms fp32. eager: as zoo loaded before "
        "(the checkpoint read whole and loaded into zoo.loader's model, the run's float model built and "
        "loaded, then quantised); lean: train.py's load now (zoo/finetune/lean.py). "
        + ("--quick: every load in one process, one after another (a smoke run: the resident peaks after "
           "the first are not from a fresh process), imports done before." if quick else
           "Each load in its own fresh process, imports done before."),
        "torch allocation peak: the highest running sum of torch's CPU allocations over the load "
        "(torch.profiler, in a process of its own: deterministic; it counts a mapped file's tensors whole, "
        "though their pages are read only when touched); process peak RSS: VmHWM above the RSS before the "
        "load (it counts a mapped file's pages once touched: clean page cache, which the kernel drops under "
        "pressure); peak anonymous RSS: RssAnon above the start, sampled every millisecond by a thread "
        "(memory only freeing returns: the measure of what the load costs); model holds: the tensors of "
        "the model built (NF4 codes and absmaxes, fp32 embeddings, norms, adapters).",
    ]
    return table, notes, {"sizes": sizes, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="append", type=json.loads, metavar="JSON",
                        help='one load in this process, [side, source, profiled]: ["lean", "zoo checkpoint", '
                             'false] (profiled: the allocation peak only); repeated, one after another')
    parser.add_argument("--folder")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps([measure(side, kind, args.folder, args.quick, profiled)
                          for side, kind, profiled in args.measure]))
        return
    table, notes, data = run_load(args.quick)
    print(table + "\n\n" + "\n".join(f"- {n}" for n in notes))
    print(json.dumps(data))


if __name__ == "__main__":
    main()
