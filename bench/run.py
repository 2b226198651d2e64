"""Run every benchmark section, print one markdown table per section, and write docs/benchmarks.md with the
machine description, the date, the goals (met / missed) and the GPU status.

    python -m bench.run                  # full suite, stores every section, writes docs/benchmarks.md
    python -m bench.run --sections mfu   # re-measures one section; the others keep their stored results
    python -m bench.run --render         # rewrites docs/benchmarks.md from the stored results only
    python -m bench.run --quick          # minutes -> seconds: tiny sizes, checks the runner; prints only
    python -m bench.run --sections attention scaling --out /tmp/b.md   # scratch: nothing stored

Each measured section is stored in bench/results/<name>.json with the machine it ran on and when, so one
section can be re-measured without re-running (or overwriting) the others; the page says each one's date.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.common import Section, goal, machine_info, markdown_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
RESULTS = Path(__file__).resolve().parent / "results"


def _training(quick: bool) -> Section:
    from bench.bench_training import run

    return run(quick)


def _mfu(quick: bool) -> Section:
    from bench.bench_mfu import run

    return run(quick)


def _generation(quick: bool) -> Section:
    from bench.external import generation

    return generation(quick)


def _attention(quick: bool) -> Section:
    from bench.bench_attention import run

    return run(quick)


def _decoding(quick: bool) -> Section:
    from bench.bench_decoding import run

    return run(quick)


def _tokenizer(quick: bool) -> Section:
    from bench.external import tokenizer

    return tokenizer(quick)


def _scaling(quick: bool) -> Section:
    from bench.bench_scaling import run

    return run(quick)


def _parity(quick: bool) -> Section:
    from bench.bench_parity import run

    return run(quick)


def _pretokenize(quick: bool) -> Section:
    from bench.bench_pretokenize import run

    return run(quick)


def _batching(quick: bool) -> Section:
    from bench.bench_batching import run

    return run(quick)


def _memory(quick: bool) -> Section:
    from bench.bench_memory import run

    return run(quick)


def _compile(quick: bool) -> Section:
    from bench.bench_compile import run

    return run(quick)


def _optim(quick: bool) -> Section:
    from bench.bench_optim import run

    return run(quick)


def _init_from(quick: bool) -> Section:
    from bench.bench_init_from import run

    return run(quick)


def _serving(quick: bool) -> Section:
    from bench.bench_serving import run

    return run(quick)


def _stopping(quick: bool) -> Section:
    from bench.bench_stopping import run

    return run(quick)


def _moe(quick: bool) -> Section:
    from bench.bench_moe import run

    return run(quick)


def _unpadding(quick: bool) -> Section:
    from bench.bench_unpadding import run

    return run(quick)


def _loop(quick: bool) -> Section:
    from bench.bench_loop import run

    return run(quick)


def _loop_causes(quick: bool) -> Section:
    from bench.bench_loop_causes import run

    return run(quick)


def _decode_large(quick: bool) -> Section:
    from bench.bench_decode_large import run

    return run(quick)


def _mla(quick: bool) -> Section:
    from bench.bench_mla import run

    return run(quick)


def _hybrid(quick: bool) -> Section:
    from bench.bench_hybrid import run

    return run(quick)


def _post_training(quick: bool) -> Section:
    from bench.bench_post_training import run_section

    return run_section(quick)


def _qlora(quick: bool) -> Section:
    from bench.bench_qlora import run

    return run(quick)


def _gpu(quick: bool) -> Section:
    from bench.gpu import run

    return run(quick)


# name -> section runner, in the order (imports are lazy so one section can run alone)
SECTIONS: dict[str, Callable[[bool], Section]] = {
    "training": _training, "mfu": _mfu, "generation": _generation, "decoding": _decoding,
    "attention": _attention, "tokenizer": _tokenizer, "scaling": _scaling, "parity": _parity,
    "pretokenize": _pretokenize, "memory": _memory, "batching": _batching, "compile": _compile,
    "optim": _optim, "init_from": _init_from, "serving": _serving, "stopping": _stopping, "moe": _moe,
    "unpadding": _unpadding, "loop": _loop, "loop_causes": _loop_causes, "decode_large": _decode_large,
    "mla": _mla, "hybrid": _hybrid, "post_training": _post_training, "qlora": _qlora, "gpu": _gpu,
}
GPU_ONLY = ("gpu",)  # left out of a full run on a machine without CUDA (run them by name on a GPU)

METHOD = """\
Every row is measured side by side in one run: the sides' calls alternate (A B C, B C A, ...), after
warm-up, and the table shows the median of the repeats (the generation section keeps its own script's
best-of-N). This machine is shared with other engineers running tests, so absolute numbers are noisy
(the training section lists each side's spread); the ratios are what to read, and even they move by
~10-20% between runs under load. Everything is fp32 on CPU with torch's default thread count."""

GPU = """\
## GPU

No GPU was lent to this task, so the GPU figures the issue asks for (training tokens/s and MFU of `gpt2`
(124M) at `bf16-mixed` with flash attention on an H200, with and without `torch.compile`) were
**not measured**. Nothing on this page is a GPU number. The script that measures them on one card in a few
minutes is ready: `python -m bench.run --sections gpu` (bench/gpu.py: gpt2 bf16-mixed vs 32-true tokens/s,
compile on/off, MFU against the card's peak, which SDPA backends run, generation with the static cache +
compiled step, peak memory); it was **not run here** (only its CPU dry run, `python -m bench.gpu --dry-run`,
and tests/bench/test_gpu_plan.py)."""


def goals_table(sections: list[Section]) -> str:
    rows = [[what, f"{value:.2f}", f">= {target:g}", goal(value, target)]
            for s in sections for what, value, target in s.goals]
    return markdown_table(["goal", "measured", "target", "status"], rows) if rows else "(no goal measured)"


@dataclass
class Stored:
    """One section's result as kept in bench/results/<name>.json: the section, and when / where it ran."""

    name: str
    section: Section
    info: dict[str, str]
    seconds: float

    def to_json(self) -> dict:
        s = self.section
        return {"name": self.name, "title": s.title, "table": s.table, "notes": s.notes,
                "goals": [list(g) for g in s.goals], "info": self.info, "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: dict) -> Stored:
        section = Section(d["title"], d["table"], list(d["notes"]), goals=[tuple(g) for g in d["goals"]])
        return cls(d["name"], section, dict(d["info"]), float(d["seconds"]))


def store(result: Stored, folder: Path = RESULTS) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)


def stored_results(folder: Path = RESULTS) -> list[Stored]:
    """Every stored section, in SECTIONS order (a stored name no longer in SECTIONS is ignored)."""
    found = []
    for name in SECTIONS:
        path = folder / f"{name}.json"
        if path.is_file():
            found.append(Stored.from_json(json.loads(path.read_text())))
    return found


def measured_line(result: Stored) -> str:
    i = result.info
    return (f"_Measured {i.get('date (UTC)', '?')} UTC by `python -m bench.run --sections {result.name}` in "
            f"{result.seconds / 60:.1f} min; load average at start "
            f"{i.get('load average at start (1 min)', '?')}._")


def document(results: list[Stored], quick: bool = False) -> str:
    """docs/benchmarks.md: machine, method, goals, each section (with when it was measured), GPU status."""
    latest = max(results, key=lambda r: r.info.get("date (UTC)", "")) if results else None
    info = {k: v for k, v in (latest.info if latest else machine_info()).items()
            if k not in ("date (UTC)", "load average at start (1 min)")}
    missing = [name for name in SECTIONS if name not in {r.name for r in results}]
    parts = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench.run` (`--sections NAME` re-measures one section; `--render` rewrites "
        "this page from the stored results in `bench/results/`). "
        + ("**--quick run: tiny sizes that only check the runner; these are not the benchmark numbers.**"
           if quick
           else "Sizes are chosen so each section fits in minutes on a 2-core CPU; each section states them "
                "and when it was measured."),
        "",
        "## Machine",
        "",
        markdown_table(["", ""], list(info.items())),
        "",
        "## Method",
        "",
        METHOD,
        "",
        "## Goals",
        "",
        goals_table([r.section for r in results]),
        "",
    ]
    if missing:
        parts += [f"Sections not measured yet: {', '.join(missing)}.", ""]
    for r in results:
        parts += [r.section.markdown(), "", measured_line(r), ""]
    if "gpu" not in {r.name for r in results}:  # a stored GPU check replaces the "not measured" note
        parts += [GPU, ""]
    return "\n".join(parts)


def run_section(name: str, quick: bool) -> tuple[Stored, bool]:
    """Run one section; a broken one is shown as FAILED (and reported) instead of losing the others."""
    info = machine_info()
    began = time.perf_counter()
    print(f"[bench] {name} ...", file=sys.stderr, flush=True)
    try:
        section, ok = SECTIONS[name](quick), True
    except Exception as e:
        ok = False
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        section = Section(f"{name} (FAILED)",
                          f"**This section failed in this run:** `{type(e).__name__}: {first}`")
    seconds = time.perf_counter() - began
    print(section.markdown() + "\n", flush=True)
    print(f"[bench] {name} done in {seconds:.0f}s", file=sys.stderr, flush=True)
    return Stored(name, section, info, seconds), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the zoo benchmark suite.")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repeats: checks the runner")
    parser.add_argument("--sections", nargs="+", default=None, metavar="NAME",
                        help=f"subset to run (default: all), from: {', '.join(SECTIONS)}")
    parser.add_argument("--render", action="store_true", help="only rewrite the page from bench/results/")
    parser.add_argument("--out", type=Path, default=None,
                        help="write a page with just this run's sections here, store nothing "
                             f"(default: store the results and rewrite {DOC}; "
                             "--quick stores nothing and writes no page)")
    args = parser.parse_args(argv)
    names = args.sections if args.sections is not None else \
        [n for n in SECTIONS if n not in GPU_ONLY or torch.cuda.is_available()]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}; allowed: {', '.join(SECTIONS)}")
    if args.render:
        DOC.write_text(document(stored_results()))
        print(f"wrote {DOC}", file=sys.stderr)
        return 0
    torch.manual_seed(0)
    runs = [run_section(name, args.quick) for name in names]
    failed = [r.name for r, ok in runs if not ok]
    print("## Goals\n\n" + goals_table([r.section for r, _ in runs]))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(document([r for r, _ in runs], args.quick))
        print(f"\nwrote {args.out}", file=sys.stderr)
    elif not args.quick:
        for r, ok in runs:
            if ok:  # a failed run never replaces a section's last good result
                store(r)
        DOC.write_text(document(stored_results()))
        print(f"\nstored {', '.join(r.name for r, ok in runs if ok) or 'nothing'}; wrote {DOC}",
              file=sys.stderr)
    if failed:
        print(f"failed sections: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
