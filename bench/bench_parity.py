"""Parity (issue 14): zoo's `train.py` path against a minimal hand-written GPT training loop, same shape,
optimizer, schedule, data, and the same validation windows, over several seeds; the final validation losses
must agree within their seed spread.

The reference side is written here from scratch, nanoGPT style (one file, no zoo imports in its model or
loop): token + learned position embeddings, pre-LN blocks with fused-QKV causal SDPA attention and a GELU MLP,
dropout after the embeddings / attention weights / each residual branch, final LayerNorm, tied head; N(0,
0.02) init with residual projections scaled by 1/sqrt(2 * n_layers); AdamW decaying matrices and embeddings
only; linear warmup then cosine to 10% of the peak; global-norm clipping; each step a fresh batch of windows
at uniformly random offsets of the training stream. zoo runs `zoo.training.run.train` on the composed train.py
config (`prepare` + `train`: data module, Lightning module, callbacks, Trainer) and its last checkpoint is
read back with `zoo.load`. Both final models are scored by one function on the same fixed validation windows
(window k = the val stream's tokens [k*T, k*T + T], T targets each), over all positions and over 0..T-2."""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bench.common import Section, markdown_table


@dataclass(frozen=True)
class Setup:
    """The compared run: model shape, batch, steps, schedule, seeds, validation windows."""

    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    seq_len: int = 64
    batch: int = 12
    dropout: float = 0.1
    steps: int = 2000
    warmup: int = 100
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    clip: float = 1.0
    min_lr_ratio: float = 0.1
    corpus_bytes: int = 1_100_000
    seeds: tuple[int, ...] = (0, 1, 2)
    val_windows: int = 800


# what is the same on both sides by construction (tests/bench/test_parity.py checks the starred items)
CHECKED = (
    "Equal on both sides: parameter count*, N(0, 0.02) init with residual projections at "
    "0.02/sqrt(2 * layers)*, zero biases, LayerNorm eps 1e-5, exact GELU, dropout after the embeddings, on "
    "the attention weights and on each residual branch, tied head without bias, AdamW groups "
    "(decay on every >= 2-D tensor incl. both embeddings, none on biases / norms), betas and eps, warmup + "
    "cosine multiplier per optimizer step*, global-norm clipping, mean cross-entropy over all T targets of "
    "each window (zoo: windows of T + 1 tokens), uniformly random window offsets over the same train stream, "
    "the same scorer and windows*."
)

FULL = Setup()
QUICK = Setup(n_layers=1, d_model=32, n_heads=2, seq_len=16, batch=4, steps=6, warmup=2, corpus_bytes=60_000,
              seeds=(0, 1), val_windows=20)


# ------------------------------------------------------------------- the hand-written reference
class RefBlock(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln_1, self.ln_2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        # (B, H, T, D)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        return self.attn_proj(y.transpose(1, 2).reshape(b, t, c))  # (B, T, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attention(self.ln_1(x)))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class RefGPT(nn.Module):
    def __init__(self, vocab: int, s: Setup) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, s.d_model), nn.Embedding(s.seq_len, s.d_model)
        self.drop = nn.Dropout(s.dropout)
        self.blocks = nn.ModuleList(RefBlock(s.d_model, s.n_heads, s.dropout) for _ in range(s.n_layers))
        self.ln_f = nn.LayerNorm(s.d_model, eps=1e-5)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * s.n_layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T  # (B, T, V), tied head


def reference_lr(step: int, s: Setup) -> float:
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    ratio = min(1.0, (step - s.warmup) / max(1, s.steps - s.warmup))
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * ratio)))


def train_reference(train_ids: torch.Tensor, vocab: int, s: Setup, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = RefGPT(vocab, s)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": s.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=s.lr, betas=s.betas, eps=1e-8)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(s.steps):
        for group in opt.param_groups:
            group["lr"] = reference_lr(step, s)
        ix = torch.randint(len(train_ids) - s.seq_len, (s.batch,), generator=gen)
        window = torch.stack([train_ids[i: i + s.seq_len + 1] for i in ix.tolist()])  # (B, T + 1)
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), window[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model.eval()


# -------------------------------------------------------------------------------- zoo's side
def zoo_overrides(s: Setup, seed: int, out: Path) -> list[str]:
    return [
        "model=gpt_small", f"model.n_layers={s.n_layers}", f"model.d_model={s.d_model}",
        f"model.n_heads={s.n_heads}", f"model.max_seq_len={s.seq_len}", f"model.dropout={s.dropout}",
        "tokenizer=char", "data=stdlib_text", f"data.max_bytes={s.corpus_bytes}", f"batch_size={s.batch}",
        "trainer=cpu", f"trainer.max_steps={s.steps}", f"eval_every={s.steps}", "trainer.limit_val_batches=1",
        "trainer.num_sanity_val_steps=0", f"trainer.gradient_clip_val={s.clip}", f"optim.lr={s.lr}",
        f"optim.weight_decay={s.weight_decay}", f"optim.betas=[{s.betas[0]},{s.betas[1]}]",
        "scheduler=cosine", f"scheduler.warmup_steps={s.warmup}", f"scheduler.min_lr_ratio={s.min_lr_ratio}",
        f"seed={seed}", "logger=none", "callbacks.samples=null", "trainer.enable_progress_bar=false",
        f"paths.output_dir={out / f'zoo-{seed}'}", f"paths.runs_dir={out}",
        f"paths.cache_dir={out / 'cache'}",
    ]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from zoo.presets import config_root
    from zoo.training.hydra_configs import register_train_configs

    register_train_configs()

    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


def streams(cfg) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The train and val token streams and vocabulary of zoo's data for `cfg` (the reference reads the
    same)."""
    from zoo.tasks import build_data
    from zoo.training.plan import prepare

    plan = prepare(cfg)
    tokenizer, dm = build_data(plan.data_cfg, plan.tokenizer_cfg, task=plan.task,
                               max_seq_len=plan.model.max_seq_len,
                               batch_size=cfg.batch_size, cache_dir=cfg.paths.cache_dir, seed=cfg.seed)
    as_tensor = lambda a: torch.from_numpy(a.astype("int64"))  # noqa: E731
    return as_tensor(dm.streams["train"]), as_tensor(dm.streams["val"]), tokenizer.vocab_size


def train_zoo(cfg) -> nn.Module:
    import zoo
    from zoo.training.run import train

    result = train(cfg)
    model, _ = zoo.load(result.last_checkpoint)
    return model


# ---------------------------------------------------------------------------------- scoring
def val_losses(logits_of, val_ids: torch.Tensor, s: Setup) -> tuple[float, float]:
    """(mean loss over all T positions, over positions 0..T-2) on the fixed windows."""
    n = min(s.val_windows, (len(val_ids) - 1) // s.seq_len)
    # (N, T + 1)
    windows = torch.stack([val_ids[k * s.seq_len: k * s.seq_len + s.seq_len + 1] for k in range(n)])
    per_position = []
    with torch.no_grad():
        for chunk in windows.split(64):
            logits = logits_of(chunk[:, :-1])  # (b, T, V)
            # (b, T)
            per_position.append(F.cross_entropy(logits.transpose(1, 2), chunk[:, 1:], reduction="none"))
    nll = torch.cat(per_position)
    return float(nll.mean()), float(nll[:, :-1].mean())


def measure(quick: bool = False) -> dict:
    s = QUICK if quick else FULL
    threads = torch.get_num_threads()
    results: dict[str, list[tuple[float, float]]] = {"zoo train.py": [], "hand-written loop": []}
    seconds = {name: 0.0 for name in results}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        train_ids, val_ids, vocab = streams(compose(zoo_overrides(s, s.seeds[0], out)))
        for seed in s.seeds:
            start = time.perf_counter()
            model = train_zoo(compose(zoo_overrides(s, seed, out)))
            seconds["zoo train.py"] += time.perf_counter() - start
            results["zoo train.py"].append(val_losses(lambda ids, m=model: m(ids).logits, val_ids, s))
            start = time.perf_counter()
            ref = train_reference(train_ids, vocab, s, seed)
            seconds["hand-written loop"] += time.perf_counter() - start
            results["hand-written loop"].append(val_losses(ref, val_ids, s))
    torch.set_num_threads(threads)  # Lightning / seeding may have changed it
    return {"setup": s, "vocab": vocab, "results": results, "seconds": seconds,
            "train_tokens": len(train_ids), "val_tokens": len(val_ids)}


def _mean_std(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {sd:.4f}"


def section(data: dict) -> Section:
    s, res = data["setup"], data["results"]
    headers = ["side", f"val loss, all {s.seq_len} positions", f"val loss, positions 0-{s.seq_len - 2}",
               "per seed (all positions)", "train wall s / run"]
    rows = [[name, _mean_std([a for a, _ in r]), _mean_std([b for _, b in r]),
             ", ".join(f"{a:.4f}" for a, _ in r),
             f"{data['seconds'][name] / len(r):.0f}"] for name, r in res.items()]
    zoo_all, ref_all = ([a for a, _ in res[k]] for k in ("zoo train.py", "hand-written loop"))
    gap = statistics.mean(zoo_all) - statistics.mean(ref_all)
    spread = max(statistics.stdev(zoo_all), statistics.stdev(ref_all)) if len(zoo_all) > 1 else 0.0
    agree = abs(gap) <= 2 * spread
    n = len(zoo_all)
    se = math.sqrt((statistics.variance(zoo_all) + statistics.variance(ref_all)) / n) if n > 1 else 0.0
    notes = [
        f"Shape: {s.n_layers} layers, d={s.d_model}, {s.n_heads} heads, T={s.seq_len}, batch {s.batch}, "
        f"dropout {s.dropout}, char tokenizer (vocab {data['vocab']}) on the first {s.corpus_bytes:,} bytes "
        f"of the stdlib corpus ({data['train_tokens']:,} train / {data['val_tokens']:,} val tokens); "
        f"{s.steps} steps, AdamW lr {s.lr} betas {s.betas} wd {s.weight_decay} (matrices and embeddings), "
        f"warmup {s.warmup} + cosine to {s.min_lr_ratio:g}x, clip {s.clip}; seeds {list(s.seeds)}; both "
        f"scored on the same {min(s.val_windows, (data['val_tokens'] - 1) // s.seq_len)} "
        "validation windows by one function.",
        f"Gap zoo - reference: {gap:+.4f} nats; seed spread (larger std of the two): {spread:.4f}: "
        + ("**agree** (|gap| <= 2 std)." if agree else "**differ** (|gap| > 2 std).")
        + (f" The gap is {abs(gap) / se:.1f} standard errors of the difference of the means "
           f"({n} seeds a side): below ~2, a real difference cannot be told from seed noise at this size "
           "(more seeds or steps would)." if se else ""),
        CHECKED,
        "Sides run one after the other (not a speed comparison: the wall times include zoo's data/Trainer "
        "set-up and checkpoint writes, and the machine is shared).",
    ]
    return Section("Parity: train.py vs a hand-written loop", markdown_table(headers, rows), notes,
                   {"results": res, "gap": gap, "spread": spread})


def run(quick: bool = False) -> Section:
    return section(measure(quick))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).markdown())
