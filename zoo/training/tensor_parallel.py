"""Tensor parallelism on a 2-D mesh with FSDP2 (`trainer=fsdp_tp trainer.tp_size=N`): the world is a
(data_parallel, tensor_parallel) mesh of world / N x N processes (Lightning's ModelParallelStrategy builds
it); the N ranks of one tensor-parallel group read the same batch and split every block's matrices between
them, and the data-parallel groups shard the result with FSDP2 as trainer=fsdp does.

The plan (Megatron's, through torch.distributed.tensor.parallel): the model is first unfused
(zoo.modules.unfused: `qkv` -> `qkv.q/k/v`, cross `kv` -> `kv.k/v`, gated `up` -> `up.gate/value`), then each
q, k, v, gate, value and ungated `up` is split column-wise (rank r keeps heads / hidden units r*n/N ... ), and
`o` and `down` row-wise (their partial outputs summed across the group). Each Attention is told its local
head counts. Embeddings, norms and the head stay whole on every rank of the group (no vocabulary-parallel
head: the loss would need a cross-rank log-sum-exp; see docs/training.md).

ALiBi's per-head bias is cut to each rank's heads (`slice_head_bias`). Refused before work starts
(`check_tensor_parallel`): sizes that do not divide, T5's learned per-head bias table, attention sinks (one
logit per head), `qk_norm_scope=all` (a norm over every head needs a cross-rank reduction) and optimizers
that need whole matrices (muon). LoRA adapters get their own styles (zoo.training.lora_parallel); MoE
experts are split as dense FFNs (the router whole: every rank of a group routes the same tokens alike),
which is not expert parallelism (future work)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from zoo.training.sharding import FSDPStrategy, fully_shard_model

# model.positional schemes with a learned bias per head: each rank would use (and train) only its heads' part
# of the whole table, whose gradient then differs per rank (it needs a cross-rank sum: refused for now).
# ALiBi's fixed slopes are sliced per rank (`slice_head_bias`).
LEARNED_HEAD_BIAS_POSITIONALS = ("t5_relative",)
TP_SIZE = 2  # trainer.tp_size when not given (conf/trainer/fsdp_tp.yaml sets it)


def tensor_parallel_plan(model: nn.Module) -> dict[str, Any]:
    """{module name: ParallelStyle} for an unfused `model`: q/k/v, gate/value and ungated up column-wise, o
    and down row-wise; everything else stays whole on every rank."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from zoo.finetune.lora import LoRALinear
    from zoo.modules.attention import Attention
    from zoo.modules.feedforward import FeedForward
    from zoo.modules.unfused import FusedColumns
    from zoo.training.lora_parallel import LoRAColwiseParallel, LoRARowwiseParallel

    shared: dict[int, nn.Parameter] = {}  # a LoRA A the parts of one fused adapter share: distributed once

    def colwise(linear: nn.Module):
        return LoRAColwiseParallel(shared) if isinstance(linear, LoRALinear) else ColwiseParallel()

    def rowwise(linear: nn.Module):
        return LoRARowwiseParallel(shared) if isinstance(linear, LoRALinear) else RowwiseParallel()

    plan: dict[str, Any] = {}
    for name, module in model.named_modules():
        if isinstance(module, (Attention, FeedForward)):
            columns = ("kv", "q") if getattr(module, "cross", False) else ("qkv", "up")
            for col in columns:
                part = getattr(module, col, None)
                if isinstance(part, FusedColumns):
                    plan.update({f"{name}.{col}.{p}": colwise(m) for p, m in part.named_children()})
                elif isinstance(part, nn.Linear):
                    plan[f"{name}.{col}"] = colwise(part)
            out = "o" if isinstance(module, Attention) else "down"
            plan[f"{name}.{out}"] = rowwise(getattr(module, out))
    return plan


def parallelize_tensors(model: nn.Module, tp_mesh) -> nn.Module:
    """Unfuse `model`, split it over the 1-D tensor-parallel `tp_mesh` (`tensor_parallel_plan`) and give each
    Attention its rank's head counts. In place; returns the model."""
    from torch.distributed.tensor.parallel import parallelize_module

    from zoo.modules.attention import Attention
    from zoo.modules.unfused import unfuse

    size, rank = tp_mesh.size(), tp_mesh.get_local_rank()
    unfuse(model)
    parallelize_module(model, tp_mesh, tensor_parallel_plan(model))
    for module in model.modules():
        if isinstance(module, Attention):  # (B, T, H/N * D) on this rank
            module.n_heads, module.n_kv_heads = module.n_heads // size, module.n_kv_heads // size
            module.register_forward_pre_hook(slice_head_bias(rank, size), with_kwargs=True)
    return model


def slice_head_bias(rank: int, size: int):
    """A forward pre-hook for an Attention holding this rank's heads: a score bias with one plane per head
    (ALiBi's, in the mask (B|1, H, Tq, Tk)) is cut to the rank's heads, H/N of them from r*H/N, the heads
    its column-wise q rows hold."""
    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        x, mask, *rest = args
        bias = mask.mask
        if bias is not None and bias.dim() == 4 and bias.shape[1] == module.n_heads * size:
            local = bias[:, rank * module.n_heads:(rank + 1) * module.n_heads]  # (B|1, H/N, Tq, Tk)
            mask = dataclasses.replace(mask, mask=local)
        return (x, mask, *rest), kwargs

    return hook


def total_grad_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all `grads` as one plain tensor, also when they are DTensors on different meshes (the
    tensor-parallel matrices on the 2-D mesh, the rest on the data-parallel one), which torch's
    get_total_norm refuses to stack: each group of one mesh and placement gets its fused norm on its own."""
    from torch.distributed.tensor import DTensor

    groups: dict[Any, list[torch.Tensor]] = {}
    for g in grads:
        groups.setdefault((g.device_mesh, g.placements) if isinstance(g, DTensor) else None, []).append(g)
    norms = [torch.nn.utils.get_total_norm(group, 2.0) for group in groups.values()]
    norms = [n.full_tensor() if isinstance(n, DTensor) else n for n in norms]
    return norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))


def clip_grad_norm(parameters, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ over `total_grad_norm`; returns the norm before clipping."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = total_grad_norm(grads)
    coef = min(1.0, float(max_norm) / (float(norm) + 1e-6))  # as torch's: no change below the threshold
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return norm


def check_tensor_parallel(model_cfg, tp_size: int, world: int) -> None:
    """ValueError naming the key when `model_cfg` cannot be split over `tp_size` ranks of a `world`-process
    run (before any process starts)."""
    if tp_size > world:
        raise ValueError(f"trainer.tp_size={tp_size} is larger than the world of {world} process(es) "
                         "(trainer.devices x trainer.num_nodes); the mesh is world / tp_size x tp_size")
    if world % tp_size:
        raise ValueError(f"trainer.tp_size={tp_size} does not divide the world of {world} processes "
                         "(trainer.devices x trainer.num_nodes)")
    sizes = {"model.n_heads": model_cfg.n_heads, "model.n_kv_heads": model_cfg.kv_heads}
    notes = {"model.d_ff": "" if model_cfg.d_ff is not None else  # derived: name what the user set
             f" (model.ffn_ratio={model_cfg.ffn_ratio} x model.d_model={model_cfg.d_model})"}
    if model_cfg.ffn.name != "none":
        sizes["model.d_ff"] = model_cfg.ffn_dim
    if model_cfg.ffn.name == "moe":  # each expert is split as a dense FFN is (the router stays whole)
        sizes["model.ffn.expert_d_ff"] = model_cfg.ffn.expert_d_ff or model_cfg.ffn_dim
    for key, value in sizes.items():
        if value % tp_size:
            raise ValueError(f"trainer.tp_size={tp_size} does not divide {key}={value}{notes.get(key, '')}: "
                             "each rank keeps "
                             f"{key.removeprefix('model.')} / tp_size of them; choose a tp_size dividing it")
    import zoo.modules.block  # noqa: F401  (every mixer registered)
    from zoo.modules.mixers import refusal_of

    mixer_refusal = refusal_of(model_cfg, "tensor_parallel_refusal")
    key, name, reason = mixer_refusal or ("model.mixer", "", "")
    refusals = {
        key: (mixer_refusal is not None, f"{name}: {reason}"),
        "model.positional": (model_cfg.positional.name in LEARNED_HEAD_BIAS_POSITIONALS,
                             f"{model_cfg.positional.name} learns a bias table with one column per head, "
                             "whose gradient each rank would only partly compute"),
        "model.mixer.qk_norm_scope": (getattr(model_cfg.mixer, "qk_norm", False)
                                      and model_cfg.mixer.qk_norm_scope == "all",
                                      "all normalises over every head, which needs a cross-rank reduction; "
                                      "qk_norm_scope=head works"),
        "model.mixer.sinks": (bool(getattr(model_cfg.mixer, "sinks", False)),
                             "true holds one logit per head, which is not sliced per rank"),
        "model.mixer.output_gate": (bool(getattr(model_cfg.mixer, "output_gate", False)),
                                    "true adds a gate projection (attention's `gate`) that the plan does not "
                                    "split by heads"),
    }
    for key, (refused, why) in refusals.items():
        if refused:
            raise ValueError(f"trainer.strategy=fsdp_tp cannot split {key}: {why}")


class FSDPTPStrategy(FSDPStrategy):
    """FSDPStrategy on a (data_parallel, tensor_parallel) mesh: `parallelize` splits the blocks over the
    tensor-parallel dimension (`parallelize_tensors`), then shards over the data-parallel one. The ranks of
    one tensor-parallel group read the same batch (`data_parallel`: this process's rank among the groups, and
    their count), so the global batch is batch_size x world / tp_size."""

    name, layout = "fsdp_tp", "unfused"

    def __init__(self, *, tp_size: int = TP_SIZE, sharded_checkpoint: bool = False, **kwargs: Any) -> None:
        super().__init__(sharded_checkpoint=sharded_checkpoint, tensor_parallel_size=tp_size, **kwargs)

    @property
    def data_parallel(self) -> tuple[int, int]:
        mesh = self.device_mesh["data_parallel"]
        return mesh.get_local_rank(), mesh.size()

    @staticmethod
    def data_parallel_size(trainer_cfg: dict[str, Any], world: int) -> int:
        """The tensor-parallel groups of a `world`-process run (each reads its own batches)."""
        return world // int(trainer_cfg.get("tp_size", TP_SIZE))

    @classmethod
    def check_config(cls, resolved: dict[str, Any], model_cfg, world: int) -> None:
        super().check_config(resolved, model_cfg, world)
        check_tensor_parallel(model_cfg, int(resolved["trainer"].get("tp_size", TP_SIZE)), world)

    def setup(self, trainer) -> None:
        super().setup(trainer)
        # gradient clipping (trainer.gradient_clip_val) over parameters on two meshes
        self.precision_plugin.clip_grad_by_norm = lambda optimizer, clip_val: clip_grad_norm(
            self.precision_plugin.main_params(optimizer), clip_val)

    def parallelize(self, model: nn.Module) -> nn.Module:
        """Split `model` over the tensor-parallel mesh, then shard it over the data-parallel one."""
        parallelize_tensors(model, self.device_mesh["tensor_parallel"])
        mixed = str(self.precision_plugin.precision) == "bf16-mixed"
        return fully_shard_model(model, self.device_mesh["data_parallel"], mixed_bf16=mixed)
