"""Generate docs/tour.md: the path one sentence takes through a Transformer, every number and picture
produced by running zoo right now. Run `python docs/make_tour.py` (about 10 s on a CPU); rerun whenever the
model code changes so the tour stays true."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import zoo  # noqa: E402
from zoo.inspection import attention_maps, flops_per_token, parameter_counts, plots, trace  # noqa: E402

IMG = ROOT / "docs" / "img"
SENTENCE = "the cat sat on the mat . the dog sat on the log ."
CONFIG = dict(arch="decoder", vocab_size=32, d_model=32, n_layers=2, n_heads=2, positional="sinusoidal",
              max_seq_len=32, norm_placement="pre", dropout=0.0)


def fmt(t: torch.Tensor, digits: int = 3) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}" for v in t.flatten().tolist()) + "]"


def main() -> None:
    torch.manual_seed(0)
    words = SENTENCE.split()
    vocab = {w: 5 + i for i, w in enumerate(dict.fromkeys(words))}  # ids 0-4 are special tokens
    id_to_word = {i: w for w, i in vocab.items()}
    ids = torch.tensor([[vocab[w] for w in words]])  # (1, T)
    model = zoo.build(CONFIG)
    loss_before = model(ids, labels=ids).loss.item()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):  # memorise the sentence so the pictures and the decoding show something learned
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
    model.eval()
    tr = trace(model, ids, labels=ids)
    cfg, T, H, D, C = (model.config, ids.shape[1], model.config.n_heads, model.config.head_size,
                       model.config.d_model)
    r = lambda name, layer=None: tr.get(name, layer=layer)  # noqa: E731
    IMG.mkdir(parents=True, exist_ok=True)
    maps = attention_maps(model, ids, tokens=words)
    plots.save_attention_maps(maps, IMG, layers=[1])
    (IMG / "attention_decoder_layer1.png").replace(IMG / "tour_attention.png")
    mask = r("mask").tensor[0, 0]
    plots.plot_mask(mask, IMG / "tour_mask.png", labels=words, title="causal mask")
    plots.plot_positional_pattern(model.config, IMG / "tour_positional.png", n_positions=32)
    plots.plot_dot_vs_distance(IMG / "tour_dot_vs_distance.png", dim=64, max_distance=128)

    q, k, v = r("q", 0).tensor, r("k", 0).tensor, r("v", 0).tensor
    scores, weights = r("scores", 0).tensor, r("weights", 0).tensor
    by_hand = (q @ k.transpose(-2, -1)) / math.sqrt(D)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    logits = r("logits").tensor[0, -2]  # the prediction after "log"
    residual = r("norm_ffn_in", 0).tensor - r("block_input", 0).tensor - r("attn_output", 0).tensor
    residual_gap = residual.abs().max()
    top = torch.topk(logits.softmax(-1), 3)
    prompt = ids[:, :4]
    decoding = greedy_and_beam(model, prompt)
    counts = parameter_counts(model)
    flops = flops_per_token(model, T)

    steps = [
        ("1. Text to token ids",
         "A tokenizer maps text to integer ids. The tour uses one id per distinct word "
         "(ids 0-4 are reserved for `<pad> <bos> <eos> <unk> <mask>`); "
         "a trained run uses `zoo.data` tokenizers.",
         "ids = torch.tensor([[vocab[w] for w in sentence.split()]])",
         f"words {words}\nids   {ids[0].tolist()}   shape {list(ids.shape)} = [B, T]"),
        ("2. Embedding + positions", "Each id selects a row of the token table (B,T) -> (B,T,C); the "
         "sinusoidal positional term (no parameters) is added; RoPE would instead rotate q and k (step 3).",
         'tr = zoo.trace(model, ids, labels=ids)\n'
         'tr.get("token_embedding"), tr.get("positional"), tr.get("embedding")',
         f"token_embedding {list(r('token_embedding').shape)}  first 4 dims of 'the': "
         f"{fmt(r('token_embedding').tensor[0, 0, :4])}\n"
         f"positional      {list(r('positional').shape)}  "
         f"position 0 = {fmt(r('positional').tensor[0, 0, :4])} (sin 0, cos 0, ...)\n"
         f"embedding       {list(r('embedding').shape)}  = token + position: max |diff| "
         f"{(r('embedding').tensor - r('token_embedding').tensor - r('positional').tensor).abs().max():.1e}",
         ["tour_positional.png"]),
        ("3. Q, K, V", "One fused projection `self_attn.qkv` gives queries, keys and values "
         f"(weight {list(model.decoder_stack.layers[0].self_attn.qkv.weight.shape)} = [(H + 2 KV) D, C]); "
         "with grouped-query attention k and v would keep fewer (KV) heads.",
         'tr.get("q", layer=0).shape, tr.get("k", layer=0).shape, tr.get("v", layer=0).shape',
         f"q {list(q.shape)}  k {list(k.shape)}  v {list(v.shape)}   = [B, H, T, D] with H={H}, D=C/H={D}"),
        ("4. Split into heads",
         "The C-wide vectors are viewed as H heads of size D: (B,T,C) -> (B,T,H,D) -> (B,H,T,D). "
         "Each head attends independently.", "q[0, h]  # head h: (T, D)",
         f"head 0 query of 'the' (first 4 dims): {fmt(q[0, 0, 0, :4])}\n"
         f"head 1 query of 'the' (first 4 dims): {fmt(q[0, 1, 0, :4])}"),
        ("5. Scaled scores",
         "scores = q k^T / sqrt(D): dividing by sqrt(D) keeps their variance near 1 so the "
         "softmax does not saturate.", 'tr.get("scores", layer=0).tensor',
         f"scores {list(scores.shape)} = [B, H, T, T]; row 'mat' (position 5), head 0, first 6 keys:\n"
         f"{fmt(scores[0, 0, 5, :6])}  (masked keys are -inf)\n"
         f"max |scores - q k^T / sqrt(D)| over visible entries = "
         f"{(scores - by_hand).masked_fill(causal, 0).abs().max():.1e}"),
        ("6. Mask",
         "A decoder may not look ahead: keys after the query get -inf before the softmax. The mask "
         "is built once per forward (`zoo.modules.mask.build_mask`) and shared by every layer.",
         'tr.get("mask").tensor[0, 0]  # what the explicit path adds to the scores',
         f"mask {list(r('mask').shape)}; -inf above the diagonal: "
         f"{bool(torch.equal(torch.isinf(mask), causal))}; first 4 rows x 4 cols:\n{mask[:4, :4]}",
         ["tour_mask.png"]),
        ("7. Softmax",
         "Each row becomes a probability distribution over the visible keys; masked entries are "
         "exactly 0.",
         "maps = zoo.inspection.attention_maps(model, ids, tokens=words)  # need_weights=True path",
         f"weights {list(weights.shape)}; row 'mat' head 0: {fmt(weights[0, 0, 5, :6])}\n"
         f"row sums: min {weights.sum(-1).min():.6f} max {weights.sum(-1).max():.6f}; masked entries all 0: "
         f"{bool((weights.masked_select(causal.expand_as(weights)) == 0).all())}\n"
         "Below: layer 1 after training; rows are queries, columns keys.",
         ["tour_attention.png"]),
        ("8. Weighted sum of V",
         "Each query's output is its weights times the values: (B,H,T,T) @ (B,H,T,D).",
         'tr.get("heads", layer=0)',
         f"heads {list(r('heads', 0).shape)}; max |heads - weights @ v| = "
         f"{(r('heads', 0).tensor - weights @ v).abs().max():.1e}"),
        ("9. Concatenate heads", "(B,H,T,D) -> (B,T,H,D) -> (B,T,C): the heads side by side.",
         'tr.get("heads_concat", layer=0)', f"heads_concat {list(r('heads_concat', 0).shape)}"),
        ("10. Output projection W_O", "`self_attn.o` mixes the heads back into the model width.",
         'tr.get("attn_output", layer=0)',
         f"attn_output {list(r('attn_output', 0).shape)}; W_O weight "
         f"{list(model.decoder_stack.layers[0].self_attn.o.weight.shape)}"),
        ("11. Residual + norm",
         "Pre-LN: x + attention(norm(x)); the sum is the residual stream that the next "
         "norm reads.", 'tr.get("norm_ffn_in", layer=0)  # = block_input + attn_output',
         f"max |norm_ffn_in - (block_input + attn_output)| = "
         f"{residual_gap:.1e}\n"
         f"norm_ffn output per-token mean {r('norm_ffn', 0).tensor.mean(-1).abs().max():.1e}, "
         f"std {r('norm_ffn', 0).tensor.std(-1, unbiased=False).mean():.3f} "
         "(LayerNorm, weight/bias trained)"),
        ("12. Feed-forward",
         f"Position-wise MLP C -> {cfg.ffn_dim} -> C with {cfg.activation}, then residual again.",
         'tr.get("ffn_hidden", layer=0)',
         f"ffn_hidden {list(r('ffn_hidden', 0).shape)} = [B, T, ratio*C]; ffn_output "
         f"{list(r('ffn_output', 0).shape)}"),
        ("13. Logits",
         "After the last layer and final norm, the (tied) head maps each position to vocabulary "
         "scores; softmax gives the next-token distribution.", 'tr.get("logits").tensor[0, -2].softmax(-1)',
         f"logits {list(r('logits').shape)} = [B, T, V]; after '... the log' the top 3: "
         + ", ".join(f"{id_to_word.get(i, i)!r} {p:.3f}"
                     for p, i in zip(top.values.tolist(), top.indices.tolist(), strict=True))),
        ("14. Loss",
         "Cross-entropy of each position's logits against the next token (the shift is internal).",
         "model(ids, labels=ids).loss",
         f"before training {loss_before:.3f} (ln V = {math.log(cfg.vocab_size):.3f}); after 150 AdamW steps "
         f"{r('loss').tensor.item():.4f}"),
        ("15. Decoding", decoding[0], decoding[1], decoding[2]),
    ]
    lines = [
        "# A tour: one sentence through a Transformer",
        "",
        "<!-- generated by docs/make_tour.py; edit that script, not this file -->",
        "",
        "Generated by `python docs/make_tour.py`: every shape, number and picture below comes from running "
        f"zoo. The model is a 2-layer, 2-head decoder (C={C}, sinusoidal positions, pre-LN, "
        f"{counts['total']:,} parameters) trained for 150 steps to memorise the sentence, so the attention "
        f"and the decoding show learned behaviour. Forward cost: {flops.forward:,} FLOPs per token at T={T} "
        f"({flops.formula}).",
        "",
        f"Sentence: `{SENTENCE}`",
        "",
    ]
    for step in steps:
        title, text, call, output = step[:4]
        lines += [f"## {title}", "", text, "", "```python", call, "```", "", "```text", output, "```", ""]
        for image in (step[4] if len(step) > 4 else []):
            lines += [f"![{title}](img/{image})", ""]
    lines += ["## Positions: similarity against distance", "",
              "The dot product of two positions' encodings as their distance grows (`zoo.inspection.plots."
              "plot_dot_vs_distance`): sinusoidal PE(m).PE(n) = sum_i cos(w_i (m-n)), and RoPE's "
              "rotate(q, m).rotate(k, n) with q = k = 1, the RoFormer long-range decay.", "",
              "![dot product vs distance](img/tour_dot_vs_distance.png)", ""]
    (ROOT / "docs" / "tour.md").write_text("\n".join(lines))
    for image in sorted(IMG.glob("tour_*.png")):
        size = image.stat().st_size
        if size >= 100_000:
            raise SystemExit(f"{image} is {size} bytes; keep docs images under 100 KB.")
    print(f"wrote docs/tour.md and {len(list(IMG.glob('tour_*.png')))} images")


def greedy_and_beam(model, prompt: torch.Tensor) -> tuple[str, str, str]:
    """Step 15: `zoo.generation.generate` when present, else an explicit argmax loop (said so)."""
    try:
        from zoo.generation import generate
    except ImportError:
        generate = None
    words = {5 + i: w for i, w in enumerate(dict.fromkeys(SENTENCE.split()))}
    show = lambda seq: " ".join(words.get(i, f"<{i}>") for i in seq)  # noqa: E731
    if generate is not None:
        greedy = generate(model, prompt, max_new_tokens=8, eos_token_id=[])
        beam = generate(model, prompt, max_new_tokens=8, num_beams=3, eos_token_id=[], return_dict=True)
        text = ("Greedy decoding appends the argmax token and feeds the sequence back (with a KV cache); "
                "beam search keeps the 3 best partial sequences by log-probability "
                "(the score shown is length-normalised).")
        call = ("zoo.generation.generate(model, prompt, max_new_tokens=8, eos_token_id=[])\n"
                "zoo.generation.generate(model, prompt, max_new_tokens=8, "
                "num_beams=3, eos_token_id=[], return_dict=True)")
        out = (f"prompt  {show(prompt[0].tolist())}\ngreedy  {show(greedy[0].tolist())}\n"
               f"beam(3) {show(beam.sequences[0].tolist())}  (score {beam.scores[0]:.3f})")
        return text, call, out
    seq = prompt
    with torch.no_grad():
        for _ in range(8):
            seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ("zoo.generation is not available in this checkout, so this is an explicit greedy argmax loop "
            "(no beam search shown).",
            "seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], 1)",
            f"prompt {show(prompt[0].tolist())}\ngreedy {show(seq[0].tolist())}")


if __name__ == "__main__":
    main()
