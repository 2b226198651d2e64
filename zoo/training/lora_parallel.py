"""Tensor-parallel styles for LoRA adapters (zoo.modules.lora.LoRALinear) under trainer=fsdp_tp.

torch's ColwiseParallel would shard every parameter of a Linear on dim 0 (lora_A on its rank dim) and
RowwiseParallel only its weight and bias (lora_A, lora_B left as plain tensors, which DTensor inputs cannot
meet). Megatron's split for y = W x + s B (A x):
- column-wise (q/k/v, gate/value, up): W and B split by output rows, A whole on every rank (A x is the same
  everywhere, each rank multiplies it by its rows of B);
- row-wise (o, down): W and A split by input columns (their products are partial sums, added by the
  layer's all-reduce), B whole.
An unfused fused adapter's parts share one A (LoRALinear.split_rows): every part is given the same
distributed A (`shared`), so its gradient still sums over q, k and v."""

from __future__ import annotations

from torch import nn
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel


def _distribute(module: nn.Module, mesh, placements: dict[str, object], shared: dict[int, nn.Parameter]
                ) -> None:
    """Put each of `module`'s own parameters on `mesh` with its placement (`placements`: name -> placement);
    a parameter seen before (a shared A) gets the same distributed parameter again."""
    for name, param in list(module.named_parameters(recurse=False)):
        if id(param) not in shared:
            shared[id(param)] = nn.Parameter(distribute_tensor(param, mesh, [placements[name]]),
                                             requires_grad=param.requires_grad)
        module.register_parameter(name, shared[id(param)])


class LoRAColwiseParallel(ColwiseParallel):
    """ColwiseParallel for a LoRALinear: weight, bias and lora_B by output rows, lora_A whole."""

    def __init__(self, shared: dict[int, nn.Parameter]) -> None:
        super().__init__()
        self.shared = shared

    def _partition_linear_fn(self, name, module, device_mesh) -> None:  # torch's hook for a Linear's params
        _distribute(module, device_mesh, {"weight": Shard(0), "bias": Shard(0), "lora_B": Shard(0),
                                          "lora_A": Replicate()}, self.shared)


class LoRARowwiseParallel(RowwiseParallel):
    """RowwiseParallel for a LoRALinear: weight and lora_A by input columns, bias and lora_B whole."""

    def __init__(self, shared: dict[int, nn.Parameter]) -> None:
        super().__init__()
        self.shared = shared

    def _partition_linear_fn(self, name, module, device_mesh) -> None:
        _distribute(module, device_mesh, {"weight": Shard(1), "bias": Replicate(), "lora_A": Shard(1),
                                          "lora_B": Replicate()}, self.shared)
