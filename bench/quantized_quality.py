"""What weight-only quantisation costs a trained model (issue 40's criteria): perplexity on the checkpoint's
built-in validation split through evaluate.py's own path, and how often the quantised model's greedy tokens
equal fp32's, per format.

    python -m bench.quantized_quality ckpt=outputs/train/runs/<time>/checkpoints/best.ckpt

Greedy agreement is reported two ways: free-running (each model continues its own text, so one flipped
token changes every later one; the share of the 64 positions equal to fp32's) and teacher-forced (both read
fp32's continuation; the share of positions where their next-token argmax is the same)."""

from __future__ import annotations

import copy
import sys
import tempfile
from pathlib import Path

import torch

import zoo
from bench.common import markdown_table

FORMATS = [("fp32", None, {}), ("int8", "int8", {}), ("int4 g128", "int4", {"group_size": 128}),
           ("int4 g32", "int4", {"group_size": 32})]
PROMPT_FILES = ("json/decoder.py", "argparse.py", "collections/__init__.py", "textwrap.py")
PROMPT, NEW = 32, 64


def val_perplexity(ckpt: str, method: str | None, options: dict) -> float:
    """evaluate.py's perplexity on split=val, with the checkpoint's model quantised as asked."""
    from hydra import compose, initialize_config_dir

    from zoo.evaluation import run as evaluation
    from zoo.training.hydra_configs import register_train_configs

    register_train_configs()
    original = evaluation.open_checkpoint

    def quantised(path: str):
        model, tokenizer, task, state = original(path)
        return (model if method is None else zoo.quantize(model, method, **options)), tokenizer, task, state

    conf = Path(__file__).resolve().parents[1] / "conf"
    with tempfile.TemporaryDirectory() as out, initialize_config_dir(config_dir=str(conf),
                                                                     version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"ckpt={ckpt}", "split=val", "device=cpu", "output=null",
                                             f"paths.output_dir={out}"])
        evaluation.open_checkpoint = quantised
        try:
            return evaluation.evaluate(cfg).metrics["perplexity"]
        finally:
            evaluation.open_checkpoint = original


def prompts(tokenizer) -> torch.Tensor:
    """(4, PROMPT) ids: the first PROMPT tokens of four standard-library files (the corpus' kind of text)."""
    import sysconfig

    lib = Path(sysconfig.get_paths()["stdlib"])
    return torch.tensor([tokenizer.encode((lib / name).read_text(encoding="utf-8"))[:PROMPT]
                         for name in PROMPT_FILES])


@torch.inference_mode()
def agreement(reference, model, ids: torch.Tensor, continuation: torch.Tensor) -> tuple[float, float]:
    """(free-running greedy agreement, teacher-forced top-1 agreement) with fp32's `continuation`."""
    free = model.generate(ids, max_new_tokens=NEW, eos_token_id=[])[:, -NEW:]
    text = torch.cat([ids, continuation], dim=1)
    ref = reference(text).logits[:, PROMPT - 1 : -1].argmax(-1)
    out = model(text).logits[:, PROMPT - 1 : -1].argmax(-1)
    return float((free == continuation).float().mean()), float((out == ref).float().mean())


def main(argv: list[str]) -> int:
    from zoo.evaluation.run import open_checkpoint

    ckpt = next((a.split("=", 1)[1] for a in argv if a.startswith("ckpt=")), None)
    if ckpt is None:
        raise SystemExit("usage: python -m bench.quantized_quality ckpt=<checkpoint>")
    model, tokenizer, _, _ = open_checkpoint(ckpt)
    model.eval()
    torch.set_num_threads(1)
    ids = prompts(tokenizer)
    continuation = model.generate(ids, max_new_tokens=NEW, eos_token_id=[])[:, -NEW:]
    rows, fp32_ppl = [], None
    for name, method, options in FORMATS:
        quantised = model if method is None else zoo.quantize(copy.deepcopy(model), method, **options)
        ppl = val_perplexity(ckpt, method, options)
        fp32_ppl = ppl if fp32_ppl is None else fp32_ppl
        free, forced = agreement(model, quantised, ids, continuation)
        rows.append([name, f"{ppl:.4f}", f"{ppl / fp32_ppl - 1:+.2%}", f"{free:.1%}", f"{forced:.1%}"])
        print(rows[-1], file=sys.stderr, flush=True)
    cfg = model.config
    print(f"Checkpoint {ckpt}: d_model {cfg.d_model}, {cfg.n_layers} layers, vocabulary {cfg.vocab_size}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters; {len(PROMPT_FILES)} prompts "
          f"of {PROMPT} tokens, {NEW} greedy tokens each.\n")
    print(markdown_table(["format", "val perplexity", "vs fp32", "greedy tokens = fp32 (free-running)",
                          "next-token argmax = fp32 (teacher-forced)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
