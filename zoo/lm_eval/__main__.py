"""`python -m zoo.lm_eval [lm-eval's arguments]`: lm-eval's own command line with `--model zoo` registered.
lm-eval 0.4 resolves `--model` only among models it imported itself, so this registers zoo's first and then
hands every argument to `lm_eval`'s CLI unchanged (`python -m zoo.lm_eval --model zoo --model_args
ckpt=best.ckpt --tasks my_task --include_path tasks/`). Releases of lm-eval that discover the
`lm_eval.models` entry point zoo's package declares resolve `lm_eval --model zoo` without it."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from lm_eval.__main__ import cli_evaluate

        import zoo.lm_eval.model  # noqa: F401  (registers --model zoo)
    except ImportError as e:
        print(f"error: {e.msg}; the lm-eval model needs lm-eval: pip install 'zoo[lmeval]'", file=sys.stderr)
        sys.exit(1)
    sys.argv[0] = "lm-eval"
    try:
        cli_evaluate()
    except zoo.lm_eval.model.ModelArgsError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except ConnectionError as e:  # datasets: a task's data on the Hub, which cannot be reached (offline)
        print(f"error: {e}: lm-eval reads this task's data from the Hugging Face Hub. Offline, run it once "
              "online (the datasets cache keeps it; then HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1), or give a "
              "task over local files (dataset_path: json, with --include_path): docs/evaluation.md, "
              "'Offline'", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
