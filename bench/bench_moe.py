"""Mixture-of-Experts (issue 25): (1) one MoE layer's forward + backward, zoo's dispatch beside transformers'
MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock and GptOssMLP at the same shapes and weights, and beside a dense
FFN with the same active parameters; (2) on the built-in corpus, 3 seeds, equal tokens: a dense decoder vs an
MoE decoder (8 experts, top-2, each expert half the dense width: equal active parameters), with and without
the balancing loss: validation loss, wall clock, tokens/s, expert-load balance (max / mean)."""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import zoo
from bench.common import Section, markdown_table
from zoo.config import ModelConfig
from zoo.modules.feedforward import FeedForward
from zoo.modules.moe import MoE, auxiliary_loss, moe_layers
from zoo.tasks import build_data


@dataclass(frozen=True)
class LayerShape:
    tokens: int
    d_model: int
    d_ff: int  # each expert's
    n_experts: int
    top_k: int
    reps: int


LAYER = {False: LayerShape(tokens=4096, d_model=256, d_ff=512, n_experts=8, top_k=2, reps=7),
         True: LayerShape(tokens=256, d_model=32, d_ff=64, n_experts=4, top_k=2, reps=2)}


def _zoo_layer(s: LayerShape, **moe) -> MoE:
    cfg = ModelConfig(d_model=s.d_model, n_heads=2, d_ff=s.d_ff, activation="swiglu", bias=False,
                      ffn={"name": "moe", "n_experts": s.n_experts, "top_k": s.top_k, "balance": {}, **moe})
    return MoE(cfg, cfg.ffn)


def _pairs(s: LayerShape) -> dict[str, tuple[torch.nn.Module, torch.nn.Module]]:
    """name -> (transformers block, zoo layer with its weights)."""
    from transformers import MixtralConfig, Qwen2MoeConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    mixtral = MixtralSparseMoeBlock(MixtralConfig(hidden_size=s.d_model, intermediate_size=s.d_ff,
                                                  num_local_experts=s.n_experts, num_experts_per_tok=s.top_k))
    qwen = Qwen2MoeSparseMoeBlock(Qwen2MoeConfig(
        hidden_size=s.d_model, moe_intermediate_size=s.d_ff, shared_expert_intermediate_size=s.d_ff,
        num_experts=s.n_experts, num_experts_per_tok=s.top_k, norm_topk_prob=False))
    ours_m, ours_q = _zoo_layer(s), _zoo_layer(s, router="softmax_topk", n_shared_experts=1, shared_gate=True)
    with torch.no_grad():
        for hf, ours in ((mixtral, ours_m), (qwen, ours_q)):
            for p in hf.parameters():
                p.normal_(0, 0.05)
            ours.router.proj.weight.copy_(hf.gate.weight)
            for i, expert in enumerate(ours.experts):
                expert.up.weight.copy_(hf.experts.gate_up_proj[i])
                expert.down.weight.copy_(hf.experts.down_proj[i])
        sh = qwen.shared_expert
        ours_q.shared.up.weight.copy_(torch.cat([sh.gate_proj.weight, sh.up_proj.weight]))
        ours_q.shared.down.weight.copy_(sh.down_proj.weight)
        ours_q.shared_gate.weight.copy_(qwen.shared_expert_gate.weight)
    return {"Mixtral (top-2 of 8)": (mixtral, ours_m), "Qwen2-MoE (+ gated shared expert)": (qwen, ours_q),
            "gpt-oss (biased router and experts, clamped SwiGLU)": _gpt_oss_pair(s)}


class _Output(torch.nn.Module):
    """A block that returns (output, router scores), as its output alone."""

    def __init__(self, block: torch.nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)[0]


def _gpt_oss_pair(s: LayerShape) -> tuple[torch.nn.Module, torch.nn.Module]:
    """transformers' GptOssMLP and zoo's layer with its weights (the fused gate_up columns: even gate, odd
    value)."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    hf = GptOssMLP(GptOssConfig(hidden_size=s.d_model, intermediate_size=s.d_ff,
                                num_local_experts=s.n_experts, num_experts_per_tok=s.top_k))
    cfg = ModelConfig(d_model=s.d_model, n_heads=2, d_ff=s.d_ff, activation="swiglu_clamped", bias=True,
                      ffn={"name": "moe", "n_experts": s.n_experts, "top_k": s.top_k, "router_bias": True,
                           "balance": {}})
    ours = MoE(cfg, cfg.ffn)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.05)
        ours.router.proj.weight.copy_(hf.router.weight)
        ours.router.proj.bias.copy_(hf.router.bias)
        ex = hf.experts
        for i, expert in enumerate(ours.experts):
            gate_up = ex.gate_up_proj[i]  # (C, 2F)
            expert.up.weight.copy_(torch.cat([gate_up[:, 0::2], gate_up[:, 1::2]], 1).t())
            expert.up.bias.copy_(torch.cat([ex.gate_up_proj_bias[i, 0::2], ex.gate_up_proj_bias[i, 1::2]]))
            expert.down.weight.copy_(ex.down_proj[i].t())
            expert.down.bias.copy_(ex.down_proj_bias[i])
    return _Output(hf), ours


def _fwd_bwd(module: torch.nn.Module, x: torch.Tensor, g: torch.Tensor) -> float:
    module.zero_grad(set_to_none=True)
    start = time.perf_counter()
    module(x).backward(g)
    return time.perf_counter() - start


def layer_timings(s: LayerShape) -> tuple[list[list[str]], list[tuple[str, float, float]]]:
    """Median forward+backward seconds of each side, measured interleaved (one rep of each in turn)."""
    torch.manual_seed(0)
    x = torch.randn(1, s.tokens, s.d_model)
    g = torch.randn_like(x)
    rows, goals = [], []
    dense_cfg = ModelConfig(d_model=s.d_model, n_heads=2, d_ff=s.top_k * s.d_ff, activation="swiglu",
                            bias=False)
    dense = FeedForward(dense_cfg)
    for name, (hf, ours) in _pairs(s).items():
        with torch.no_grad():
            torch.testing.assert_close(ours(x), hf(x), atol=1e-4, rtol=1e-4)  # same layer
        times: dict[str, list[float]] = {"hf": [], "zoo": [], "dense": []}
        for _ in range(s.reps + 1):  # the first rep warms up
            times["hf"].append(_fwd_bwd(hf, x, g))
            times["zoo"].append(_fwd_bwd(ours, x, g))
            times["dense"].append(_fwd_bwd(dense, x, g))
        med = {k: statistics.median(v[1:]) for k, v in times.items()}
        ratio = med["hf"] / med["zoo"]
        rows.append([name, f"{med['hf'] * 1000:.1f}", f"{med['zoo'] * 1000:.1f}", f"**{ratio:.2f}x**",
                     f"{med['dense'] * 1000:.1f}", f"{med['zoo'] / med['dense']:.2f}x"])
        goals.append((f"MoE fwd+bwd, transformers {name.split()[0]} / zoo", ratio, 1.0))
    return rows, goals


# ------------------------------------------------------------------------------ dense vs MoE training
@dataclass(frozen=True)
class Train:
    max_bytes: int
    vocab: int
    seq_len: int
    batch: int
    steps: int
    val_batches: int
    d_model: int = 64
    n_layers: int = 2
    d_ff: int = 256  # dense width; each of the 8 experts gets d_ff / top_k
    lr: float = 3e-3
    seeds: tuple[int, ...] = (0, 1, 2)


TRAIN = {False: Train(max_bytes=1_000_000, vocab=512, seq_len=64, batch=16, steps=300, val_batches=8),
         True: Train(max_bytes=200_000, vocab=300, seq_len=32, batch=4, steps=10, val_batches=2, seeds=(0,))}
VARIANTS = {
    "dense FFN": {"ffn": "mlp"},
    "MoE 8x top-2, aux loss 0.01": {"ffn": {"name": "moe", "n_experts": 8, "top_k": 2,
                                            "balance": {"aux": 0.01}}},
    "MoE 8x top-2, no balancing loss": {"ffn": {"name": "moe", "n_experts": 8, "top_k": 2, "balance": {}}},
}


def _lm_loss(model, batch) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"]).logits
    return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=-100)


def train_one(t: Train, data, vocab_size: int, keys: dict, seed: int) -> dict:
    torch.manual_seed(seed)
    d_ff = t.d_ff // 2 if keys["ffn"] == "moe" else t.d_ff  # top-2 of experts half as wide: equal active
    model = zoo.build("gpt_small", n_layers=t.n_layers, d_model=t.d_model, n_heads=2, dropout=0.0,
                      vocab_size=vocab_size, max_seq_len=t.seq_len, d_ff=d_ff, activation="swiglu", **keys)
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=0.1, betas=(0.9, 0.95))
    train_batches, val = data
    loads = []
    start = time.perf_counter()
    for batch in train_batches:
        model.train()
        loss = _lm_loss(model, batch)
        aux = auxiliary_loss(model)
        (loss if aux is None else loss + aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        val_loss = statistics.fmean(float(_lm_loss(model, b)) for b in val)
        for _, layer in moe_layers(model):  # balance over the validation batches' last forward, per layer
            share = layer.last.load.float() / layer.last.load.sum()
            loads.append(float(share.max() / share.mean()))
    tokens = len(train_batches) * t.batch * t.seq_len
    return {"val": val_loss, "seconds": seconds, "tok_s": tokens / seconds,
            "balance": max(loads) if loads else None, "params": model.num_parameters()}


def _load(t: Train, seed: int, cache: str):
    tok, dm = build_data({"name": "stdlib_text", "max_bytes": t.max_bytes},
                         {"name": "bpe", "vocab_size": t.vocab}, task="lm", max_seq_len=t.seq_len,
                         batch_size=t.batch, cache_dir=cache, seed=seed)
    dm.setup("fit")
    train, batches, epoch = dm.train_dataloader(), [], 0
    while len(batches) < t.steps:
        train.sampler.set_epoch(epoch)
        batches += list(train)
        epoch += 1
    val = [b for _, b in zip(range(t.val_batches), dm.val_dataloader(), strict=False)]
    return (batches[: t.steps], val), tok.vocab_size


def _mean_sd(values: list[float], fmt: str) -> str:
    mean = statistics.fmean(values)
    return (f"{mean:{fmt}} ± {statistics.stdev(values):{fmt}}" if len(values) > 1 else f"{mean:{fmt}}")


def training_rows(t: Train) -> tuple[list[list[str]], dict[str, dict[str, float]]]:
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as cache:
        for seed in t.seeds:
            data, vocab_size = _load(t, seed, cache)
            for name, keys in VARIANTS.items():
                results[name].append(train_one(t, data, vocab_size, keys, seed))
    rows, means = [], {}
    for name, runs in results.items():
        means[name] = {k: statistics.fmean(r[k] for r in runs) for k in ("val", "seconds", "tok_s")}
        means[name]["val_sd"] = statistics.stdev(r["val"] for r in runs) if len(runs) > 1 else 0.0
        balance = [r["balance"] for r in runs if r["balance"] is not None]
        rows.append([name, f"{runs[0]['params']:,}", _mean_sd([r["val"] for r in runs], ".3f"),
                     _mean_sd([r["seconds"] for r in runs], ".1f"),
                     _mean_sd([r["tok_s"] for r in runs], ".0f"),
                     _mean_sd(balance, ".2f") if balance else "-"])
    return rows, means


def run(quick: bool = False) -> Section:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the loaded 2-core machine: one thread is steadier (both sides alike)
    try:
        s = LAYER[quick]
        layer_rows, goals = layer_timings(s)
        t = TRAIN[quick]
        train_rows, means = training_rows(t)
    finally:
        torch.set_num_threads(threads)
    layer_table = markdown_table(
        ["block (same weights)", "transformers ms", "zoo ms", "transformers / zoo",
         "dense FFN ms (equal active)", "zoo MoE / dense"], layer_rows)
    train_table = markdown_table(
        ["model", "parameters (total)", f"val loss ({len(t.seeds)} seeds)", "wall clock s", "tokens/s",
         "expert load max / mean"], train_rows)
    dense, moe = means["dense FFN"], means["MoE 8x top-2, aux loss 0.01"]
    gap, spread = dense["val"] - moe["val"], max(dense["val_sd"], moe["val_sd"])
    per_second = "wins" if gap > spread and moe["tok_s"] >= dense["tok_s"] else "does not win"
    per_token = ("is within the seed-to-seed spread per token, no clear win" if abs(gap) <= spread
                 else "wins per token" if gap > 0 else "loses per token")
    notes = [
        f"Layer: {s.tokens} tokens, d_model {s.d_model}, {s.n_experts} experts of width {s.d_ff} (SwiGLU), "
        f"top-{s.top_k}, fp32, 1 thread, median of {s.reps} forward+backward passes measured interleaved; "
        "the outputs are checked equal first. The dense FFN has width top_k * expert width (the same active "
        "parameters). transformers' blocks in their default (eager) experts implementation.",
        f"Training: gpt_small with {t.n_layers} layers, d_model {t.d_model}, SwiGLU; dense width {t.d_ff}, "
        f"experts {t.d_ff // 2} each (top-2: equal active parameters); data=stdlib_text (first "
        f"{t.max_bytes:,} bytes), bpe vocab {t.vocab}, T={t.seq_len}, batch {t.batch}, {t.steps} AdamW steps "
        f"(lr {t.lr}, same batches and seed for every model), val loss = mean over {t.val_batches} fixed "
        "batches; load balance = the most loaded expert's share over the mean share, worst layer, on the "
        "last validation batch.",
        f"Here MoE {per_token} (val loss {moe['val']:.3f} vs dense {dense['val']:.3f} after equal tokens, "
        f"seed spread ± {spread:.3f}) and runs at {moe['tok_s'] / dense['tok_s']:.2f}x the dense model's "
        f"tokens/s, so per second it {per_second} on this machine.",
    ]
    table = layer_table + "\n\n" + train_table
    return Section("Mixture-of-Experts: dispatch and dense vs MoE", table, notes, goals=goals)
