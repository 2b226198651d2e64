"""Decoding at the memory-bandwidth limit (issue 29) and gpt-fast-style decoding (issue 15 item 3).

1. The limit: batch-1 decoding reads every weight once per token, so tokens/s x bytes read per step is
   compared with what this machine can read (bench/bandwidth.py, measured in the same run), per model
   (gpt_small, the issue's GPT-2-shape d384 x 6, llama_small) and batch (1, 8, 32), for transformers'
   `generate`, zoo's default path and zoo's `compile=True` on the same weights (zoo models are written with
   `zoo.save_pretrained` and loaded by transformers; the GPT-2 one goes the other way).
2. Batch 1 on the GPT-2 shape: static cache + compile, speculative decoding and int8 weights.

Random weights: the draft for speculative decoding is the same checkpoint cut to its first `draft_layers`
blocks; perplexities are measured on text sampled from the fp32 model.

    python -m bench.run --sections decoding
"""

from __future__ import annotations

import copy
import math
import tempfile
import time

import torch

import zoo
from bench import decoding_limit
from bench.common import Section, goal, interleaved, markdown_table

DRAFT_TOKENS = 4  # draft tokens proposed per speculative round
SIZES = {
    False: dict(d_model=384, layers=6, heads=6, vocab=8192, prompt=64, new=64, repeats=3, draft_layers=1,
                ppl_rows=8, ppl_len=128),
    True: dict(d_model=32, layers=2, heads=2, vocab=128, prompt=8, new=8, repeats=1, draft_layers=1,
               ppl_rows=2, ppl_len=16),
}


def _hf_gpt2(size: dict, layers: int, state: dict | None = None):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=size["vocab"], n_positions=size["prompt"] + size["new"] + 64,
                     n_embd=size["d_model"], n_layer=layers, n_head=size["heads"], resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    if state is not None:  # the draft: the target's tensors for every block it has
        missing, _ = model.load_state_dict(state, strict=False)
        assert not [k for k in missing if "attn.bias" not in k], missing
    model.generation_config.eos_token_id = None  # every step runs, as zoo's eos_token_id=[]
    model.generation_config.pad_token_id = 0
    return model


def build_models(size: dict):
    """(HF target, zoo target, zoo draft) with the same weights."""
    torch.manual_seed(0)
    hf = _hf_gpt2(size, size["layers"])
    draft_hf = _hf_gpt2(size, size["draft_layers"], hf.state_dict())
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(f"{tmp}/target")
        draft_hf.save_pretrained(f"{tmp}/draft")
        ours = zoo.from_pretrained(f"{tmp}/target", dropout=0.0)
        draft = zoo.from_pretrained(f"{tmp}/draft", dropout=0.0)
    return hf, ours, draft


@torch.inference_mode()
def perplexity(model, rows: torch.Tensor) -> float:
    return math.exp(float(model(rows, labels=rows).loss))


def run(quick: bool = False) -> Section:
    limit_size = decoding_limit.SIZES[quick]

    def hf_gpt2():  # the GPT-2 shape, long enough for the limit table's runs
        torch.manual_seed(0)
        return _hf_gpt2(dict(SIZES[quick], prompt=limit_size["prompt"], new=limit_size["new"]),
                        SIZES[quick]["layers"])

    threads = torch.get_num_threads()
    try:  # the limit table picks the fastest thread count for matrix-vector work; this section keeps it
        return _run(quick, hf_gpt2)
    finally:
        torch.set_num_threads(threads)


def _run(quick: bool, hf_gpt2) -> Section:
    limit_table, limit_notes, limit_data, limit_goals = decoding_limit.run(quick, hf_gpt2)
    size = SIZES[quick]
    hf, ours, draft = build_models(size)
    int8 = zoo.quantize(copy.deepcopy(ours), "int8")
    new = size["new"]
    ids = torch.randint(3, size["vocab"], (1, size["prompt"]), generator=torch.Generator().manual_seed(1))
    greedy = dict(max_new_tokens=new, eos_token_id=[])

    def hf_generate():
        with torch.inference_mode():
            return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=False)

    sides = {
        "HF generate": hf_generate,
        "zoo dynamic cache": lambda: ours.generate(ids, **greedy),
        "zoo static cache + compile": lambda: ours.generate(ids, compile=True, **greedy),
        "zoo speculative (draft)": lambda: ours.generate(ids, assistant_model=draft,
                                                         num_assistant_tokens=DRAFT_TOKENS,
                                                          **greedy),
        "zoo int8": lambda: int8.generate(ids, **greedy),
    }
    compile_s = {}
    for name in ("zoo static cache + compile",):
        start = time.perf_counter()
        sides[name]()  # first call: traces and compiles the one-token step
        compile_s[name] = time.perf_counter() - start
    outputs = {name: fn() for name, fn in sides.items()}
    timings = interleaved(sides, warmup=1, repeats=size["repeats"])
    for name in compile_s:
        compile_s[name] -= timings[name].median  # the first call minus a steady call: compile only
    reference = outputs["HF generate"]
    hf_tps = new / timings["HF generate"].median
    dyn_tps = new / timings["zoo dynamic cache"].median
    spec = ours.generate(ids, assistant_model=draft, num_assistant_tokens=DRAFT_TOKENS, return_dict=True,
                         **greedy)
    rows, goals = [], list(limit_goals)
    for name, timing in timings.items():
        tps = new / timing.median
        same = outputs[name].shape == reference.shape and torch.equal(outputs[name], reference)
        agree = float((outputs[name][0, -new:] == reference[0, -new:]).float().mean()) if not same else 1.0
        rows.append([name, f"{tps:.1f}", f"{timing.spread:.0%}", f"{tps / hf_tps:.2f}x",
                     f"{tps / dyn_tps:.2f}x", "yes" if same else f"no ({agree:.0%} of new tokens)"])
    static_ratio = timings["HF generate"].median / timings["zoo static cache + compile"].median
    goals.append(("decoding b1: zoo static cache + compile / HF generate", static_ratio, 2.0))
    spec_ratio = timings["zoo dynamic cache"].median / timings["zoo speculative (draft)"].median
    int8_ratio = timings["zoo dynamic cache"].median / timings["zoo int8"].median
    samples = ours.generate(torch.full((size["ppl_rows"], 1), 3), max_new_tokens=size["ppl_len"] - 1,
                            do_sample=True, seed=0, eos_token_id=[])
    ppl_fp32, ppl_int8 = perplexity(ours, samples), perplexity(int8, samples)
    goals.append(("decoding: int8 perplexity within 1% (fp32 ppl / int8 ppl, >= 0.99)", ppl_fp32 / ppl_int8,
                  0.99))
    table = markdown_table(["decoder, batch 1, greedy", "tok/s", "spread", "/ HF", "/ zoo dynamic",
                            "same tokens as HF"],
                           rows)
    summary = markdown_table(["measure", "value"], [
        ["static cache + compile / HF generate (goal >= 2)",
         f"{static_ratio:.2f}x ({goal(static_ratio, 2.0)})"],
        ["compile seconds (first call minus a steady call)",
         f"{compile_s['zoo static cache + compile']:.1f} s"],
        ["speculative: acceptance rate "
         f"({size['draft_layers']}-layer draft, {DRAFT_TOKENS} tokens per round)",
         f"{spec.acceptance_rate:.2f}"],
        ["speculative / zoo dynamic cache (speed-up)", f"{spec_ratio:.2f}x"],
        ["int8 / fp32, dynamic cache (speed-up)", f"{int8_ratio:.2f}x"],
        ["perplexity fp32 -> int8 (change)",
         f"{ppl_fp32:.3f} -> {ppl_int8:.3f} ({(ppl_int8 / ppl_fp32 - 1):+.2%})"],
    ])
    notes = limit_notes + [
        f"Second table: shape gpt_small's (d_model {size['d_model']}, {size['layers']} layers, "
        f"{size['heads']} heads, "
        f"vocab {size['vocab']}), random init, HF GPT-2 weights loaded into zoo; prompt {size['prompt']} + "
        f"{new} new tokens, every step run (no EOS); torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads.",
        f"Sides interleaved after one warm-up round, median of {size['repeats']}; `spread` = (max - min) / "
        "median per side (load from other work on this machine shows there).",
        "Compile time is not in the tok/s: torch.compile traces the step once per "
        "(model, batch, buffer size) and later calls reuse it.",
        f"Speculative: draft = the same checkpoint cut to its first {size['draft_layers']} block(s); its "
        "output is the target's greedy output (same tokens column). "
        "Random weights: acceptance on a trained pair differs.",
        f"Perplexity: {size['ppl_rows']} x {size['ppl_len']} tokens sampled from the fp32 model (seed 0), "
        "scored by the fp32 and the int8 model (weight-only int8, per-channel scales, through "
        "`torch._weight_int8pack_mm` in bf16: docs/quantization.md). With random weights the predictions "
        "are near-uniform (perplexity close to the vocabulary size), so this change is a weak check; "
        "tests/quantization/test_api.py bounds the logits' error (< 2% relative L2) and docs/quantization.md "
        "has a trained model's perplexity.",
    ]
    data = {"tok_s": {n: new / t.median for n, t in timings.items()}, "compile_s": compile_s,
            "acceptance_rate": spec.acceptance_rate, "ppl": (ppl_fp32, ppl_int8), "limit": limit_data}
    return Section("Decoding: share of the read-bandwidth limit; static cache, compile, speculative, int8",
                   limit_table + "\n\n" + table + "\n\n" + summary, notes, data, goals)


if __name__ == "__main__":
    print(run().markdown())
