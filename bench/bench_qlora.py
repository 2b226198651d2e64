"""QLoRA against LoRA: peak memory and step time of fine-tuning a SmolLM2-135M-shaped model (random weights)
with finetune=qlora (every linear layer of the blocks held in NF4, adapters on them) and finetune=lora on the
same layers over fp32 weights, side by side.

Peak memory is counted two ways. Tensors: the bytes of every tensor the model holds after the method is
applied (weights, NF4 codes, adapters), plus the highest running sum of torch.profiler's CPU allocation
events over the optimizer's creation and the steps (gradients, Adam's moments, activations, the per-matmul
dequantised weights); deterministic, unaffected by load, and what a GPU's max_memory_allocated would count.
Process: each side in its own process, its peak resident set (VmHWM) from start (imports, the fp32 build
before quantising) and over the steps alone (reset through /proc/self/clear_refs after setup); it includes
the Python and library pages, which no method changes."""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import zoo
from bench.common import Section, interleaved, markdown_table
from zoo.finetune import apply_finetune
from zoo.finetune.lora import generic_name
from zoo.finetune.qlora import body_linears
from zoo.modules.checkpointing import set_activation_checkpointing

SIZES = {
    False: {"preset": "smollm2_135m", "overrides": {"max_seq_len": 256}, "batch": 1, "seq_len": 128,
            "block_size": 64, "repeats": 2},
    True: {"preset": "gpt_nano", "overrides": {}, "batch": 2, "seq_len": 16, "block_size": 32, "repeats": 1},
}
RANK, ALPHA = 8, 16.0
SIDES = {  # side -> (method, activation checkpointing); QLoRA's paper trains with checkpointing on
    "lora": ("lora", False), "qlora": ("qlora", False),
    "lora_checkpointed": ("lora", True), "qlora_checkpointed": ("qlora", True),
}


def method_cfg(name: str, model: torch.nn.Module, size: dict) -> dict:
    """finetune=qlora (every linear layer outside the head) or finetune=lora on those same layers."""
    if name == "qlora":
        return {"name": "qlora", "rank": RANK, "alpha": ALPHA, "block_size": size["block_size"]}
    return {"name": "lora", "rank": RANK, "alpha": ALPHA,
            "targets": sorted({generic_name(p) for p in body_linears(model)})}


def prepared(side: str, size: dict) -> torch.nn.Module:
    """The model with random weights (same seed for every side), the side's method and activation
    checkpointing applied, in train mode."""
    method, checkpointing = SIDES[side]
    torch.manual_seed(0)
    model = zoo.build(size["preset"], dropout=0.0, **size["overrides"]).train()
    apply_finetune(model, method_cfg(method, model, size))
    set_activation_checkpointing(model, checkpointing)
    gc.collect()
    return model


def held_bytes(model: torch.nn.Module) -> int:
    """Bytes of the distinct tensors the model holds (a tied tensor once)."""
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for t in [*model.parameters(), *model.buffers()]}
    return sum(seen.values())


def stepper(model: torch.nn.Module, size: dict):
    """A closure making one AdamW step on a fixed random batch; the optimizer is made on the first call."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, model.config.vocab_size, (size["batch"], size["seq_len"]), generator=gen)
    state: dict = {}

    def step() -> float:
        if "opt" not in state:
            state["opt"] = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        state["opt"].zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        state["opt"].step()
        return float(loss.detach())

    return step


def peak_during(fn) -> int:
    """Highest sum of CPU tensor bytes allocated and not yet freed during `fn()`."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def _status(key: str) -> int:
    """A /proc/self/status field in bytes (VmHWM, VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def process_side(name: str, quick: bool) -> dict:
    """Run in a fresh process: peak RSS from start (through setup) and over the steps alone."""
    size = SIZES[quick]
    model = prepared(name, size)
    step = stepper(model, size)
    setup_peak, rss_after_setup = _status("VmHWM"), _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    for _ in range(2):
        step()
    return {"setup_peak": setup_peak, "rss_after_setup": rss_after_setup, "steps_peak": _status("VmHWM")}


def in_fresh_process(names: tuple[str, ...], quick: bool) -> dict:
    """process_side of each of `names`, one after another in one fresh process."""
    args = [sys.executable, "-m", "bench.bench_qlora", "--side", *names] + (["--quick"] if quick else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout
    return json.loads(out.strip().splitlines()[-1])


def run(quick: bool = False) -> Section:
    """Both tables: fine-tuning (the sides above) and the load of init_from (bench.bench_qlora_load)."""
    from bench.bench_qlora_load import run_load

    size = SIZES[quick]
    sides = tuple(SIDES)
    # a process per side; --quick: all in one, one after another (a child's imports cost more than its steps)
    batches = [sides] if quick else [(name,) for name in sides]
    processes = {name: found for batch in batches for name, found in in_fresh_process(batch, quick).items()}
    models = {name: prepared(name, size) for name in sides}
    steps = {name: stepper(models[name], size) for name in sides}
    held = {name: held_bytes(models[name]) for name in sides}
    peaks = {name: peak_during(lambda s=steps[name]: [s(), s()]) for name in sides}  # optimizer made here
    tensors = {name: held[name] + peaks[name] for name in sides}
    timings = interleaved(steps, warmup=0, repeats=size["repeats"])
    with torch.device("meta"):
        plain = zoo.build(size["preset"], **size["overrides"])
    params, adapted = sum(p.numel() for p in plain.parameters()), len(body_linears(plain))
    trainable = {name: sum(p.numel() for p in models[name].parameters() if p.requires_grad) for name in sides}
    mb = 2**20
    rows = []
    for name in sides:
        method, checkpointing = SIDES[name]
        base = "lora_checkpointed" if checkpointing else "lora"
        rows.append([f"finetune={method}", "on" if checkpointing else "off", f"{held[name] / mb:,.0f}",
                     f"{peaks[name] / mb:,.0f}", f"{tensors[name] / mb:,.0f}",
                     f"{tensors[name] / tensors[base]:.2f}", f"{processes[name]['steps_peak'] / mb:,.0f}",
                     f"{processes[name]['setup_peak'] / mb:,.0f}", f"{timings[name].median:.2f}",
                     f"{timings[name].median / timings[base].median:.2f}", f"{timings[name].spread:.0%}"])
    table = markdown_table(["method", "activation checkpointing", "held MB", "step peak MB", "tensor peak MB",
                            "vs lora",
                            "process peak over steps MB", "process peak in setup MB", "step s (median)",
                            "time vs lora", "spread"], rows)
    ratio = tensors["qlora_checkpointed"] / tensors["lora_checkpointed"]
    plain_ratio = tensors["qlora"] / tensors["lora"]
    notes = [
        f"{size['preset']} shape ({params / 1e6:,.0f}M parameters, random weights, tied embeddings), batch "
        f"{size['batch']} x {size['seq_len']} tokens, fp32 activations, AdamW; both methods adapt the same "
        f"{adapted} linear layers at rank {RANK} ({trainable['lora']:,} trainable "
        f"parameters each); qlora holds their base in NF4 (bitsandbytes, block size {size['block_size']}, "
        "fp32 absmax: 4.5 bits a weight), the embeddings and the tied head stay fp32 in both.",
        "held MB: the tensors the model holds once the method is applied; step peak MB: the highest running "
        "sum of torch's CPU allocations over the optimizer's creation and two steps (gradients, Adam's "
        "moments, activations, qlora's per-matmul dequantised weight); tensor peak = held + step peak "
        f"(deterministic); vs lora: against LoRA with the same checkpointing. With activation checkpointing "
        f"(as QLoRA is trained) QLoRA's tensor peak is {ratio:.2f}x LoRA's: the issue's goal (below half) is "
        f"{'met' if ratio < 0.5 else 'missed'}; without it the activations of {size['seq_len']} tokens, the "
        f"same for both, weigh as much as what NF4 saves, and the ratio is {plain_ratio:.2f}.",
        "process peak: VmHWM of each side in its own fresh process, over two steps after setup (reset "
        "through /proc/self/clear_refs) and from its start through setup"
        + (" (--quick: all sides in one process, one after another, so a side after the first starts from "
           "what the ones before left: a smoke run, not a measurement)" if quick else "")
        + "; both include the Python, torch "
        "(and for qlora bitsandbytes) pages. In setup, qlora's includes the fp32 model built before it is "
        "quantised (these sides build a model from random weights, not from init_from); a run with "
        "init_from loads lean, measured in the table below.",
        f"Step s: {size['repeats']} interleaved steps per side after two warm-up steps, median; spread = "
        "(max - min) / median. This machine is shared with other engineers running tests on 2 cores (load "
        "average ~6-9 while measured): at this many steps the times resolve only differences larger than "
        "the spread, so read them as rough. What qlora adds per step is bitsandbytes dequantising every "
        "base weight twice (forward and backward) on the CPU.",
    ]
    load_table, load_notes, load = run_load(quick)
    return Section("QLoRA vs LoRA: fine-tuning peak memory and step time", f"{table}\n\n{load_table}",
                   notes + load_notes,
                   data={"held": held, "step_peak": peaks, "tensor_peak": tensors, "process": processes,
                         "step_s": {n: timings[n].median for n in sides}, "ratio": ratio,
                         "ratio_without_checkpointing": plain_ratio, "load": load},
                   goals=[("QLoRA tensor peak below half of fp32 LoRA's, activation checkpointing on both "
                           "(lora / qlora >= 2)", 1 / ratio, 2.0)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", nargs="+", choices=tuple(SIDES),
                        help="measure these sides' process peaks in this process, one after another (JSON)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.side:
        print(json.dumps({name: process_side(name, args.quick) for name in args.side}))
    else:
        section = run(args.quick)
        print(section.markdown())


if __name__ == "__main__":
    main()
