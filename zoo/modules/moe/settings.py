"""The keys of `model.moe` (ffn=moe), declared once: `MoESettings`' fields are the allowed keys, their type
hints the allowed values (`zoo.options.Options.of`). A key that only one router or balancing loss reads is
accepted only with that entry chosen (each entry names what it `reads`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from zoo.options import Options, Rule, integer, number, optional
from zoo.owned_keys import Vocabulary

_NAMES = Rule(lambda v: isinstance(v, str) and bool(v)
              or isinstance(v, (list, tuple)) and all(isinstance(x, str) and x for x in v),
              "a name or a list of names")


@dataclass(frozen=True)
class MoESettings:
    """What one Mixture-of-Experts layer needs; `model.moe` is a mapping of these keys."""

    n_experts: Annotated[int, integer(1)] = 8
    top_k: Annotated[int, integer(1)] = 2  # experts each token goes to
    n_shared_experts: Annotated[int, integer(0)] = 0  # always-on experts (Qwen2-MoE, DeepSeek), one FFN of
    #                                                   width n_shared_experts * expert_d_ff
    shared_gate: bool = False  # shared experts' output times sigmoid(x . w) (Qwen2-MoE)
    expert_d_ff: Annotated[int | None, optional(integer(1))] = None  # each expert's hidden size; null: d_ff
    router: str = "topk_softmax"  # zoo.modules.moe.routers.ROUTERS
    router_bias: bool = False  # the router's linear map has a bias (gpt-oss)
    route_scale: Annotated[float, number(0, low_open=True)] = 1.0  # kept weights multiplied by this
    #                                                                (DeepSeek-V3's routed_scaling_factor)
    bias_rate: Annotated[float, number(0)] = 0.001  # router sigmoid_bias: the bias step per update (gamma)
    balance: Annotated[str | list[str], _NAMES] = "aux"  # zoo.modules.moe.balance.BALANCES, one or several
    aux_coef: Annotated[float, number(0)] = 0.01  # balance aux: its coefficient
    z_coef: Annotated[float, number(0)] = 0.001  # balance z: its coefficient
    capacity_factor: Annotated[float | None, optional(number(0, low_open=True))] = None  # null: dropless;
    #   else in training each expert takes at most ceil(factor * tokens * top_k / n_experts) tokens, the
    #   rest dropped (at inference none is)
    #   which layers are MoE: model.layer_pattern (tags moe | dense; every layer is MoE when it tags none)

    @property
    def balances(self) -> tuple[str, ...]:
        return (self.balance,) if isinstance(self.balance, str) else tuple(self.balance)


OPTIONS = Options.of(MoESettings)


def parse_settings(given: Mapping[str, Any] | None,
                   entries: Callable[[MoESettings], Iterable[tuple[str, Any]]],
                   vocabulary: Vocabulary) -> MoESettings:
    """`model.moe` checked and read: unknown keys and bad values raise naming `model.moe.<key>`, and a key no
    chosen entry reads names the entry that does. `entries(settings)` gives the chosen router and balancing
    losses as (`model.moe.router=...`, entry) pairs (an unknown name raises naming it), `vocabulary` which
    entry reads which key (`zoo.modules.moe.layer.moe_vocabulary`, from each entry's `reads`)."""
    given = dict(given or {})
    OPTIONS.check("model.moe", given)
    settings = MoESettings(**{k: (list(v) if isinstance(v, tuple) else v) for k, v in given.items()})
    if settings.top_k > settings.n_experts:
        raise ValueError(f"model.moe.top_k={settings.top_k} exceeds model.moe.n_experts="
                         f"{settings.n_experts}; each token goes to top_k of the n_experts experts.")
    chosen = [what for what, _ in entries(settings)]
    for key, group in vocabulary.unread(given)[:1]:
        raise ValueError(f"model.moe.{key} is not read by the chosen {', '.join(chosen)}; it applies to "
                         f"model.moe.{group}={vocabulary.readers(key)}.")
    return settings
