"""Decoding speed: zoo vs Hugging Face `transformers` GPT-2 of the same shape (random init), side by side.

Tokens/s for `--new` new tokens after a `--prompt`-token prompt: batch 1 and 8, with and without the KV
cache, and beam search (4 beams). Prints a markdown table with zoo/HF ratios and zoo's cache speed-up.
Needs the `bench` extra (transformers). Not a test: nothing is asserted.

    python bench/bench_generation.py                       # d_model 256, 4 layers, 256 + 256 tokens
    python bench/bench_generation.py --device cuda --d-model 768 --layers 12
"""

from __future__ import annotations

import argparse
import time

import torch

import zoo


def build_pair(args):
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_cfg = GPT2Config(vocab_size=args.vocab, n_positions=args.prompt + args.new, n_embd=args.d_model,
                        n_layer=args.layers, n_head=args.heads, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    hf = GPT2LMHeadModel(hf_cfg).to(args.device).eval()
    hf.generation_config.eos_token_id = None  # run every step, like zoo's eos_token_id=[]
    hf.generation_config.pad_token_id = 0
    ours = zoo.build(dict(arch="decoder", vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers,
                          n_heads=args.heads, activation="gelu_tanh", positional="learned",
                          max_seq_len=args.prompt + args.new, dropout=0.0, bias=True, tie_embeddings=True))
    return ours.to(args.device).eval(), hf


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, *args, device: str):
    """(seconds, result) of fn(*args)."""
    sync(device)
    start = time.perf_counter()
    result = fn(*args)
    sync(device)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=1,
                        help="best of N, zoo and HF interleaved (noisy hosts)")
    parser.add_argument("--skip", nargs="*", default=[], help="case names to skip, e.g. 'b8 no cache'")
    args = parser.parse_args()
    torch.manual_seed(0)
    ours, hf = build_pair(args)
    cases = []
    for b in args.batches:
        cases += [(f"b{b} cache", b, dict(use_cache=True)), (f"b{b} no cache", b, dict(use_cache=False))]
    cases.append((f"b1 beam {args.beams}", 1, dict(use_cache=True, num_beams=args.beams)))

    def run_zoo(ids, kw, new):
        return ours.generate(ids, max_new_tokens=new, eos_token_id=[], **kw)

    def run_hf(ids, kw, new):
        with torch.inference_mode():
            return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=False, **kw)

    ids1 = torch.randint(3, args.vocab, (1, 8), device=args.device)
    for kw in (dict(use_cache=True), dict(use_cache=True, num_beams=2)):  # warm up kernels and caches
        run_zoo(ids1, kw, 4)
        run_hf(ids1, kw, 4)
    rows = []
    for name, b, kw in cases:
        if name in args.skip:
            continue
        ids = torch.randint(3, args.vocab, (b, args.prompt), device=args.device)
        results = {"zoo": 0.0, "hf": 0.0}
        for _ in range(args.repeats):
            for lib, fn in (("zoo", run_zoo), ("hf", run_hf)):
                seconds, seq = timed(fn, ids, kw, args.new, device=args.device)
                assert seq.shape[1] == args.prompt + args.new, (lib, name, seq.shape)
                results[lib] = max(results[lib], b * args.new / seconds)
        rows.append((name, results["zoo"], results["hf"]))
        print(f"  {name}: zoo {results['zoo']:.1f} tok/s, hf {results['hf']:.1f} tok/s", flush=True)
    print(f"\nshape: d_model {args.d_model}, {args.layers} layers, {args.heads} heads, vocab {args.vocab}; "
          f"prompt {args.prompt} + {args.new} new tokens; device {args.device}; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}\n")
    print("| case | zoo tok/s | HF tok/s | zoo / HF |")
    print("|---|---:|---:|---:|")
    for name, z, h in rows:
        print(f"| {name} | {z:.1f} | {h:.1f} | {z / h:.2f}x |")
    by_name = {name: (z, h) for name, z, h in rows}
    for b in args.batches:
        c, n = by_name.get(f"b{b} cache"), by_name.get(f"b{b} no cache")
        if c and n:
            print(f"\nbatch {b}: cache / no cache = zoo {c[0] / n[0]:.1f}x, HF {c[1] / n[1]:.1f}x")


if __name__ == "__main__":
    main()
