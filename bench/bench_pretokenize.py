"""Streaming pre-tokenisation of a generated corpus far larger than a training run's text: MB/s, peak RSS,
and the speed-up of the tokenizers library's threads over one thread.

    python -m bench.run --sections pretokenize [--quick]
    python -m bench.bench_pretokenize --corpus-mb 1000 --slice-mb 16     # the same, standalone

The corpus is generated under /tmp (the interpreter's standard-library sources, concatenated many times in
seeded file orders) and kept there for later runs. Two measurements:

1. the whole corpus through ``zoo.data.pretokenize.pretokenize`` in a fresh process (so its peak RSS is the
   pre-tokenisation's own, read from ``getrusage(RUSAGE_CHILDREN)``): MB/s and peak RSS;
2. on a slice, side by side (alternating, median): zoo's pre-tokenisation with the library's threads, the same
   with ``TOKENIZERS_PARALLELISM=false`` (one thread), and the library's own ``encode_batch`` over the slice's
   pieces already in memory (threads on): the reference for what batch encoding alone costs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Section, interleaved, markdown_table

WORK = Path(tempfile.gettempdir()) / "zoo_bench_pretokenize"
SIZES = {False: dict(corpus_mb=1000, slice_mb=8, repeats=3), True: dict(corpus_mb=4, slice_mb=2, repeats=1)}
VOCAB = 4096


def generate_corpus(path: Path, megabytes: int, seed: int = 0) -> Path:
    """``megabytes`` MB of UTF-8 text: stdlib sources in a new seeded order per pass (kept if already
    there)."""
    target = megabytes * 1_000_000
    if path.is_file() and path.stat().st_size == target:
        return path
    from zoo.data.sources.stdlib import stdlib_files

    texts = []
    for f in stdlib_files():
        try:
            texts.append(f.read_bytes().decode("utf-8").encode("utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    rng, written = random.Random(seed), 0
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as out:
        while written < target:
            rng.shuffle(texts)
            for data in texts:
                room = target - written
                if len(data) >= room:  # the last file: cut at a line end, padded with newlines to the size
                    data = data[:room]
                    end = data.rfind(b"\n") + 1
                    data = data[:end] + b"\n" * (room - end)
                out.write(data)
                written += len(data)
                if written >= target:
                    break
    os.replace(tmp, path)
    return path


def tokenizer_file() -> Path:
    """A BPE tokenizer (vocab VOCAB) trained on the stdlib corpus's training split, saved under WORK."""
    folder = WORK / f"bpe{VOCAB}"
    if not (folder / "tokenizer.json").is_file():
        from zoo.data.sources.stdlib import load_stdlib_text
        from zoo.tokenizers import build_tokenizer

        build_tokenizer({"name": "bpe", "vocab_size": VOCAB}, load_stdlib_text().train).save(folder)
    return folder


CHILD = """
import json, resource, sys, tempfile, time
from pathlib import Path
from zoo.data.documents import FileSpan, FileSpans
from zoo.data.pretokenize import pretokenize
from zoo.tokenizers import load_tokenizer
tok = load_tokenizer(sys.argv[1]); path = Path(sys.argv[2])
docs = FileSpans((FileSpan(path, 0, path.stat().st_size),))
base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # after the imports (zoo imports torch)
with tempfile.TemporaryDirectory(dir=sys.argv[3]) as out:
    start = time.perf_counter()
    n = pretokenize(tok, docs, Path(out), "train.tokens", append_eos=True, progress=False)
    seconds = time.perf_counter() - start
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "tokens": n, "bytes": docs.nbytes, "base_rss_mb": base_kb / 1024,
                  "peak_rss_mb": peak_kb / 1024}))
"""


def whole_corpus(tok_dir: Path, corpus: Path) -> dict:
    """Pre-tokenise the whole corpus in a fresh process: its wall time, its RSS after the imports and its peak
    RSS (MB, the process's own ``ru_maxrss``)."""
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tok_dir), str(corpus), str(WORK)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def slice_sides(tok_dir: Path, corpus: Path, slice_mb: int) -> dict:
    """The three sides on the first ``slice_mb`` MB of the corpus, as zero-argument callables."""
    from zoo.data.documents import FileSpan, FileSpans
    from zoo.data.pretokenize import pretokenize
    from zoo.tokenizers import load_tokenizer
    from zoo.tokenizers.tiling import windows

    tok = load_tokenizer(tok_dir)
    cut = min(corpus.stat().st_size, slice_mb * 1_000_000)
    with open(corpus, "rb") as f:
        cut = f.read(cut).rfind(b"\n") + 1
    docs = FileSpans((FileSpan(corpus, 0, cut),))
    in_memory = [window.text for window in windows(docs.spans[0].text())]
    out = WORK / "slice_out"
    out.mkdir(exist_ok=True)

    def zoo(parallel: bool):
        def run():
            os.environ["TOKENIZERS_PARALLELISM"] = "true" if parallel else "false"
            pretokenize(tok, docs, out, "t", append_eos=True, progress=False)
        return run

    def library():
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
        tok.hf.encode_batch(in_memory, add_special_tokens=False)

    return {"sides": {"zoo, threads": zoo(True), "zoo, 1 thread": zoo(False),
                      "tokenizers encode_batch, threads": library},
            "mb": cut / 1e6}


def run(quick: bool = False, corpus_mb: int | None = None, slice_mb: int | None = None) -> Section:
    size = dict(SIZES[quick])
    size["corpus_mb"] = corpus_mb or size["corpus_mb"]
    size["slice_mb"] = slice_mb or size["slice_mb"]
    WORK.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    corpus = generate_corpus(WORK / f"corpus_{size['corpus_mb']}mb.txt", size["corpus_mb"])
    tok_dir = tokenizer_file()
    setup_s = time.perf_counter() - began
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    load_before = os.getloadavg()[0]
    try:
        whole = whole_corpus(tok_dir, corpus)
        sl = slice_sides(tok_dir, corpus, size["slice_mb"])
        timing = interleaved(sl["sides"], warmup=1, repeats=size["repeats"])
    finally:
        if previous is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = previous
    load_after = os.getloadavg()[0]
    rates = {name: sl["mb"] / t.median for name, t in timing.items()}
    speedup = rates["zoo, threads"] / rates["zoo, 1 thread"]
    vs_library = rates["zoo, threads"] / rates["tokenizers encode_batch, threads"]
    whole_rate = whole["bytes"] / 1e6 / whole["seconds"]
    rows = [[f"whole corpus, {whole['bytes'] / 1e6:,.0f} MB, zoo (threads, fresh process)",
             f"{whole_rate:.2f}", f"{whole['peak_rss_mb']:,.0f} ({whole['base_rss_mb']:,.0f} after imports)",
             "", f"{whole['tokens']:,}"]]
    rows += [[f"slice {sl['mb']:.0f} MB: {name}", f"{rates[name]:.2f}", "", f"{t.spread:.0%}", ""]
             for name, t in timing.items()]
    notes = [
        f"Corpus: the stdlib sources concatenated in seeded orders to {size['corpus_mb']:,} MB under {WORK} "
        f"(generated once, {setup_s:.0f}s with the tokenizer); BPE vocab {VOCAB} trained on the stdlib's "
        "training split; ids uint16. Peak RSS is the child process's whole RSS "
        "(Python, torch imported by zoo, the tokenizer, buffers); in brackets its RSS before pre-tokenising.",
        f"Slice rows: median of {size['repeats']} alternating runs after a warm-up; 'spread' = (max - min) / "
        f"median. zoo with threads / zoo on 1 thread = **{speedup:.2f}x**; zoo with threads / the library's "
        f"own encode_batch on pieces already in memory = {vs_library:.2f}x "
        "(what reading, splitting and writing cost).",
        f"{os.cpu_count()} logical cores; load average {load_before:.1f} before and {load_after:.1f} after "
        "the measurement: other engineers' jobs share these cores, so the threads' speed-up is a lower bound "
        "of what an idle 2-core machine gives.",
    ]
    data = {"whole": whole, "rates": rates, "speedup": speedup, "vs_library": vs_library,
            "load": [load_before, load_after]}
    goals = [("pre-tokenisation threads vs 1 thread (2 cores)", speedup, 1.5),
             ("1 GiB / peak RSS of pre-tokenising the corpus", 1024 / whole["peak_rss_mb"], 1.0)]
    table = markdown_table(["what", "MB/s", "peak RSS MB", "spread", "tokens"], rows)
    return Section("Streaming pre-tokenisation", table, notes, data, goals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--corpus-mb", type=int, default=None)
    parser.add_argument("--slice-mb", type=int, default=None)
    args = parser.parse_args()
    print(run(args.quick, args.corpus_mb, args.slice_mb).markdown())


if __name__ == "__main__":
    main()
