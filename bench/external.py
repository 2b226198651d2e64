"""Sections measured by other owners' benchmarks, called from the suite:

- generation: `bench/bench_generation.py` (the decoding owner's script: zoo vs HF GPT-2 `generate`, with
  and without KV cache, greedy and beam) run as a subprocess with suite sizes; its markdown table is kept
  and the goal ratios are read from it.
- tokenizer: `bench/bench_tokenizer.py`'s `bench()` (the data owner's: BPE training and encoding MB/s on
  the stdlib corpus), repeated and reduced to medians here."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from pathlib import Path

from bench.common import Section, goal, markdown_table

ROOT = Path(__file__).resolve().parent.parent

GENERATION_ARGS = {
    False: ["--repeats", "1", "--batches", "1", "8"],
    True: ["--d-model", "32", "--layers", "1", "--heads", "2", "--vocab", "128", "--prompt", "8", "--new",
           "8", "--batches", "1", "--beams", "2"],
}
TOKENIZER_SIZES = {False: {"max_bytes": 1_000_000, "vocab_sizes": (4096,), "repeats": 2},
                   True: {"max_bytes": 30_000, "vocab_sizes": (300,), "repeats": 1}}

_ROW = re.compile(r"^\| (?P<case>[^|]+?) \| (?P<zoo>[\d.]+) \| (?P<hf>[\d.]+) \| [\d.]+x \|$")


def generation_rows(output: str) -> dict[str, tuple[float, float]]:
    """`case -> (zoo tok/s, HF tok/s)` from bench_generation's markdown table."""
    return {m["case"]: (float(m["zoo"]), float(m["hf"])) for m in map(_ROW.match, output.splitlines()) if m}


def generation(quick: bool = False) -> Section:
    args = [sys.executable, str(ROOT / "bench" / "bench_generation.py"), *GENERATION_ARGS[quick]]
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"bench/bench_generation.py exited with {done.returncode} "
                           f"({' '.join(args[1:])}):\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
    out = done.stdout
    rows = generation_rows(out)
    table_start = out.index("| case |")
    shape_line = next((line for line in out.splitlines() if line.startswith("shape:")), "")
    goals, summary = [], []
    for case, (zoo_tps, hf_tps) in rows.items():
        goals.append((f"generation {case}: zoo / HF", zoo_tps / hf_tps, 1.0))
    for batch in ("b1", "b8"):
        if f"{batch} cache" in rows and f"{batch} no cache" in rows:
            zoo_ratio = rows[f"{batch} cache"][0] / rows[f"{batch} no cache"][0]
            hf_ratio = rows[f"{batch} cache"][1] / rows[f"{batch} no cache"][1]
            goals.append((f"generation {batch}: KV cache / no cache (zoo)", zoo_ratio, 5.0))
            summary.append([batch, f"{zoo_ratio:.1f}x ({goal(zoo_ratio, 5.0)})", f"{hf_ratio:.1f}x"])
    table = out[table_start:].split("\n\n")[0].strip()
    if summary:
        table += "\n\n" + markdown_table(["batch", "zoo cache / no cache (goal >= 5)", "HF cache / no cache"],
                                         summary)
    notes = [
        shape_line.strip(),
        f"Measured by `python bench/bench_generation.py {' '.join(GENERATION_ARGS[quick])}` "
        "(the decoding owner's script): greedy unless beam, every step run (no early EOS), zoo and HF "
        "interleaved, best of the repeats (that script's choice, not the median). HF reference: "
        "`GPT2LMHeadModel.generate` of the same shape.",
    ]
    return Section("Generation (zoo generate vs Hugging Face generate)", table, notes, {"rows": rows}, goals)


def tokenizer(quick: bool = False) -> Section:
    from bench.bench_tokenizer import bench
    from zoo.data.sources.stdlib import load_stdlib_text

    size = TOKENIZER_SIZES[quick]
    texts = load_stdlib_text(max_bytes=size["max_bytes"]).train
    rows = []
    configs = [{"name": "bpe", "vocab_size": v} for v in size["vocab_sizes"]] + [{"name": "char"}]
    for cfg in configs:
        runs = [bench(texts, cfg) for _ in range(size["repeats"])]
        med = {key: statistics.median(r[key] for r in runs)
               for key in ("train_mbs", "encode_mbs", "bytes_per_token")}
        rows.append([cfg["name"], runs[0]["vocab"], f"{runs[0]['mb']:.2f}", f"{med['train_mbs']:.2f}",
                     f"{med['encode_mbs']:.2f}", f"{med['bytes_per_token']:.2f}"])
    headers = ["tokenizer", "vocab", "corpus MB", "train MB/s", "encode MB/s", "bytes/token"]
    notes = ["`bench/bench_tokenizer.py`'s `bench()` (the data owner's) on the stdlib corpus's training "
             f"split (max_bytes {size['max_bytes']:,}), median of {size['repeats']} runs; train = BPE "
             "training, encode = `encode_batch` in chunks as the cache builder does. Absolute rates, no "
             "reference side: zoo's BPE is the `tokenizers` library's."]
    return Section("Tokenizer throughput", markdown_table(headers, rows), notes)
