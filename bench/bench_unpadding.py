"""Does ModernBERT's unpadded path pay on CPU? A ModernBERT-shaped encoder (zoo's `modernbert_base` preset,
fewer layers) runs one right-padded batch three ways, forward only (inference, the embedder's case):

- padded: zoo's forward, (B, T) with an attention mask: every linear layer also runs on the pads;
- packed: the real tokens of the batch in one row with `document_ids` (zoo's packed documents: each text
  attends only to itself, positions restart): no pad anywhere, but one (N, N) attention mask;
- unpadded linears: a prototype written here of ModernBERT's unpadding without a varlen attention kernel
  (CPU has none): norms, projections and the MLP on the N real tokens only, scattered back to (B, T) for
  the attention call alone.

Each side's output is checked against the padded one at the real tokens before timing."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import zoo
from bench.common import Section, interleaved, markdown_table

SIZES = {False: {"batch": 8, "seq": 512, "n_layers": 3}, True: {"batch": 2, "seq": 64, "n_layers": 3}}
REGIMES = {"heavy padding (lengths T/8..T)": 8, "light padding (lengths 3T/4..T)": 4 / 3}


def right_padded(batch: int, seq: int, shortest: float, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(int(seq / shortest), seq + 1, (batch,), generator=gen)
    lengths[0] = seq
    mask = (torch.arange(seq)[None] < lengths[:, None]).long()
    return torch.randint(5, vocab, (batch, seq), generator=gen), mask


def packed(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The real tokens as one row of documents -> their hidden states (N, C)."""
    real = mask.bool()
    docs = torch.arange(ids.shape[0])[:, None].expand_as(ids)[real][None]  # (1, N)
    return model(ids[real][None], document_ids=docs).hidden_states[0]


def unpadded_linears(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ModernBERT's pre-norm layers with every token-wise op on the real tokens only -> (N, C)."""
    b, t = ids.shape
    x, masks, terms = model.embed_and_mask(model.embed, ids, causal=False, attention_mask=mask)
    where = mask.bool().flatten().nonzero().squeeze(1)  # (N,) real positions of the flattened batch
    x = x.flatten(0, 1)[where]  # (N, C)
    stack = model.encoder_stack
    for i, layer in enumerate(stack.layers):
        attn = layer.self_attn
        h, d = attn.n_heads, attn.head_dim
        qkv = x.new_zeros(b * t, 3 * h * d)
        qkv[where] = attn.qkv(layer.norm_self(x))  # (N, 3C) scattered into (B*T, 3C)
        q, k, v = (part.view(b, t, h, d).transpose(1, 2) for part in qkv.view(b, t, -1).chunk(3, dim=-1))
        rotation = terms.for_layer(stack.local[i])
        q, k = rotation.rotate(q), rotation.rotate(k)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=masks.for_layer(stack.local[i]).mask)
        x = x + attn.o(out.transpose(1, 2).reshape(b * t, h * d)[where])  # back to the N real tokens
        x = x + layer.ffn(layer.norm_ffn(x))
    return stack.final_norm(x)


def run(quick: bool = False) -> Section:
    size = SIZES[quick]
    warmup, repeats = (1, 2) if quick else (1, 7)
    overrides = dict(n_layers=size["n_layers"], max_seq_len=size["seq"], head="none")
    if quick:
        overrides.update(d_model=64, n_heads=4, d_ff=96, vocab_size=128, mixer={"sliding_window": 8})
    model = zoo.build("modernbert_base", **overrides).eval()
    rows = []
    for regime, shortest in REGIMES.items():
        ids, mask = right_padded(size["batch"], size["seq"], shortest, model.config.vocab_size)
        real = mask.bool()
        with torch.inference_mode():
            reference = model(ids, attention_mask=mask).hidden_states[real]  # (N, C)
            for name, fn in (("packed", packed), ("unpadded linears", unpadded_linears)):
                error = (fn(model, ids, mask) - reference).abs().max().item()
                assert error < 1e-3, (name, error)
            sides = {"padded": lambda ids=ids, mask=mask: model(ids, attention_mask=mask),
                     "packed": lambda ids=ids, mask=mask: packed(model, ids, mask),
                     "unpadded": lambda ids=ids, mask=mask: unpadded_linears(model, ids, mask)}
            tm = interleaved(sides, warmup=warmup, repeats=repeats)
        pad = 1 - real.float().mean().item()
        base = tm["padded"].median
        rows.append([regime, f"{100 * pad:.0f}%", f"{base * 1e3:.0f}",
                     f"{tm['packed'].median * 1e3:.0f} ({base / tm['packed'].median:.2f}x)",
                     f"{tm['unpadded'].median * 1e3:.0f} ({base / tm['unpadded'].median:.2f}x)"])
    c = model.config
    headers = ["batch", "pads", "padded ms", "packed ms (speed-up)", "unpadded linears ms (speed-up)"]
    notes = [
        f"`modernbert_base` with {c.n_layers} layers (global, local, local; d_model {c.d_model}, "
        f"{c.n_heads} heads, GeGLU {c.d_ff}, window {c.mixer.sliding_window} on either side), "
        f"B={size['batch']}, "
        f"T={size['seq']}, head none, fp32, forward under inference_mode; speed-up = padded / side (> 1: "
        "the side is faster).",
        "Every side's hidden states equal the padded forward's at the real tokens (checked before timing).",
    ]
    title = "Unpadding (ModernBERT): padded vs packed vs unpadded linears"
    return Section(title, markdown_table(headers, rows), notes)


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv).markdown())
