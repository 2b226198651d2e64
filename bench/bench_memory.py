"""Memory levers: peak memory of one training step (forward + backward) with and without activation
checkpointing and the chunked cross-entropy, and the step-time cost of each, side by side.

Peak memory is read from torch.profiler's memory events: every CPU tensor allocation and free made through
torch's allocator during the step, in time order; the peak is the highest running sum above what existed
before the step (weights, and gradients kept from a warm-up step, so the number is activations and
temporaries). It is deterministic (no RSS noise from the allocator or from other processes) and counts
exactly the tensors the levers are meant to avoid."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

import zoo
from bench.common import Section, interleaved, markdown_table
from zoo.modules.checkpointing import chunked_cross_entropy, set_activation_checkpointing
from zoo.modules.heads import lm_loss

SIZES = {  # a GPT-2-vocabulary decoder at CPU scale
    False: {"n_layers": 4, "d_model": 256, "n_heads": 4, "vocab_size": 50257, "batch": 4, "seq_len": 256,
            "chunk": 128, "repeats": 3},
    True: {"n_layers": 2, "d_model": 32, "n_heads": 2, "vocab_size": 4096, "batch": 2, "seq_len": 32,
           "chunk": 16, "repeats": 1},
}
SIDES = {  # name -> (activation checkpointing, chunked loss)
    "plain": (False, False),
    "activation checkpointing": (True, False),
    "chunked cross-entropy": (False, True),
    "both": (True, True),
}


def make_step(size: dict, checkpointing: bool, chunked: bool):
    """One training step's forward + backward of a fresh gpt_small-shaped model (same seed for every side)."""
    torch.manual_seed(0)
    model = zoo.build("gpt_small", n_layers=size["n_layers"], d_model=size["d_model"],
                      n_heads=size["n_heads"], vocab_size=size["vocab_size"], max_seq_len=size["seq_len"],
                      dropout=0.0).train()
    set_activation_checkpointing(model, checkpointing)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, size["vocab_size"], (size["batch"], size["seq_len"] + 1), generator=gen)
    inputs, targets = ids[:, :-1], ids[:, 1:]

    def step() -> float:
        model.zero_grad(set_to_none=False)  # gradients stay allocated: the peak is the step's own tensors
        if chunked:
            hidden = model(inputs, skip_head=True).hidden_states
            loss = chunked_cross_entropy(hidden, model.head, targets, size["chunk"])
        else:
            loss = lm_loss(model(inputs).logits, targets, shift=False)
        loss.backward()
        return float(loss.detach())

    return step


def peak_bytes(step) -> int:
    """Highest sum of CPU tensor bytes allocated and not yet freed during one call of `step`."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def run(quick: bool = False) -> Section:
    size = SIZES[quick]
    steps = {name: make_step(size, *levers) for name, levers in SIDES.items()}
    losses = {name: step() for name, step in steps.items()}  # warm-up: gradients allocated, kernels loaded
    peaks = {name: peak_bytes(step) for name, step in steps.items()}
    timings = interleaved(steps, warmup=0, repeats=size["repeats"])
    logits_mb = size["batch"] * size["seq_len"] * size["vocab_size"] * 4 / 2**20
    rows = []
    for name in SIDES:
        rows.append([name, f"{peaks[name] / 2**20:,.0f}", f"{peaks[name] / peaks['plain']:.2f}",
                     f"{timings[name].median:.2f}", f"{timings[name].median / timings['plain'].median:.2f}",
                     f"{timings[name].spread:.0%}"])
    table = markdown_table(["training step", "peak MB", "peak vs plain", "step s (median)", "time vs plain",
                            "spread"], rows)
    loss_gap = max(abs(v - losses["plain"]) for v in losses.values())
    notes = [
        f"gpt_small shape with {size['n_layers']} layers, d_model {size['d_model']}, vocabulary "
        f"{size['vocab_size']:,}, batch {size['batch']} x {size['seq_len']} tokens, fp32; chunk "
        f"{size['chunk']} positions; one (B, T, V) fp32 logits tensor is {logits_mb:,.0f} MB.",
        "Peak MB: torch.profiler memory events of one forward + backward (allocations minus frees in time "
        "order, highest point), above the weights and their "
        "kept gradients; deterministic, unaffected by load.",
        f"Step times: {size['repeats']} interleaved repeats per side after a warm-up, median; spread = "
        "(max - min) / median on this shared machine.",
        f"At this vocabulary the logits dominate: checkpointing alone takes the peak to "
        f"{peaks['activation checkpointing'] / peaks['plain']:.2f}x; with the chunked loss it takes "
        f"{peaks['chunked cross-entropy'] / 2**20:,.0f} MB to {peaks['both'] / 2**20:,.0f} MB "
        f"({peaks['both'] / peaks['chunked cross-entropy']:.2f}x).",
        f"All four sides give the same loss (largest difference {loss_gap:.1e}); gradients are equal to 1e-6 "
        "(tests/modules/test_checkpointing.py).",
    ]
    return Section("Memory levers (activation checkpointing, chunked cross-entropy)", table, notes,
                   data={"peaks": peaks, "losses": losses})
