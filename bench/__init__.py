"""zoo benchmarks: every row is a ratio measured side by side in one run (interleaved calls, median of
repeats after warm-up). `python -m bench.run` runs every section and writes docs/benchmarks.md."""
