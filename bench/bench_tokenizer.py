"""Tokenizer throughput on the built-in stdlib corpus, printed as a markdown table.

    python bench/bench_tokenizer.py [--max-bytes 4000000] [--vocab-sizes 1024 4096 16384]

(with zoo installed, e.g. ``pip install -e .``, or ``PYTHONPATH=.`` from the repository root).

Training MB/s = training-split bytes / BPE training seconds; encoding MB/s = bytes / seconds to
encode the same text with ``encode_batch`` (chunked as the cache builder does). Single run, wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from zoo.data.pretokenize import encode_documents
from zoo.data.sources.stdlib import load_stdlib_text
from zoo.tokenizers import build_tokenizer


def bench(texts: list[str], cfg: dict) -> dict[str, float]:
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    start = time.perf_counter()
    tok = build_tokenizer(cfg, texts)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    ids = encode_documents(tok, texts, append_eos=False)
    encode_s = time.perf_counter() - start
    return {
        "vocab": tok.vocab_size,
        "mb": n_bytes / 1e6,
        "train_s": train_s,
        "train_mbs": n_bytes / 1e6 / train_s,
        "encode_mbs": n_bytes / 1e6 / encode_s,
        "bytes_per_token": n_bytes / max(1, len(ids.ids)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-bytes", type=int, default=4_000_000)
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[1024, 4096, 16384])
    args = parser.parse_args()
    texts = load_stdlib_text(max_bytes=args.max_bytes).train
    print(
        f"stdlib corpus, training split; {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS', 'unset')}\n"
    )
    print("| tokenizer | vocab | corpus MB | train s | train MB/s | encode MB/s | bytes/token |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    configs = [{"name": "bpe", "vocab_size": v} for v in args.vocab_sizes] + [{"name": "char"}]
    for cfg in configs:
        r = bench(texts, cfg)
        print(
            f"| {cfg['name']} | {r['vocab']} | {r['mb']:.2f} | {r['train_s']:.2f} | {r['train_mbs']:.2f} "
            f"| {r['encode_mbs']:.2f} | {r['bytes_per_token']:.2f} |"
        )


if __name__ == "__main__":
    main()
