"""`model.layer_pattern`: what each layer of a stack is, in one place. A layer is a `+`-joined set of tags,
at most one per dimension (mixer: full | linear, window: local | global, rotary: rope | nope, ffn: dense |
moe); a dimension a layer does not tag takes the model's default (`model.mixer`, local when
`model.mixer.sliding_window` is set, rotating, the FFN `model.ffn` names). The list is tiled over the stack;
`prefix` layers come first:

    layer_pattern: [local, local, local, local, local, global]     # Gemma 3: five local, then one global
    layer_pattern: [rope, rope, rope, nope]                         # SmolLM3: every 4th layer without RoPE
    layer_pattern: {prefix: [dense, dense, dense], cycle: [moe]}    # DeepSeek: three dense layers first
    layer_pattern: [linear, linear, linear, full]                   # Qwen3-Next: 3 model.linear_mixer layers,
                                                                    # then one of model.mixer

Transformers' per-layer lists (`layer_types`, `no_rope_layers`, `mlp_only_layers`) map onto it both ways
(`from_layers` finds the shortest cycle). Pure data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zoo.utils import did_you_mean

TAGS: dict[str, str] = {"full": "mixer", "linear": "mixer", "local": "window", "global": "window",
                        "rope": "rotary", "nope": "rotary", "dense": "ffn", "moe": "ffn"}  # tag -> dimension


def parse_layer(spec: str, path: str) -> frozenset[str]:
    """'local+moe' -> {'local', 'moe'}; an unknown tag or two of one dimension raise naming `path`."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"{path} must be tags joined by '+' ({', '.join(TAGS)}); got {spec!r}.")
    tags = spec.split("+")
    for tag in tags:
        if tag not in TAGS:
            raise ValueError(f"{path}={spec!r}: unknown layer tag {tag!r}.{did_you_mean(tag, TAGS)} "
                             f"Tags: {', '.join(TAGS)} (at most one of each pair, joined by '+').")
    dims = [TAGS[t] for t in tags]
    if len(set(dims)) < len(dims):
        raise ValueError(f"{path}={spec!r} gives two tags of one dimension; at most one of full|linear, "
                         "local|global, rope|nope and dense|moe.")
    return frozenset(tags)


@dataclass(frozen=True)
class LayerPattern:
    """`prefix` layers, then `cycle` repeated; empty: every layer takes the defaults."""

    prefix: tuple[str, ...] = ()
    cycle: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: Any, path: str = "model.layer_pattern") -> LayerPattern:
        """A list (the cycle), a mapping {prefix, cycle}, null or a LayerPattern."""
        if isinstance(value, LayerPattern):
            return value
        if value is None:
            return cls()
        if isinstance(value, str):  # one spec for every layer
            value = [value]
        if isinstance(value, Mapping):
            unknown = set(value) - {"prefix", "cycle"}
            if unknown:
                raise ValueError(f"{path} takes the keys prefix and cycle; got {sorted(unknown)}.")
            prefix, cycle = value.get("prefix") or (), value.get("cycle") or ()
        else:
            prefix, cycle = (), value
        for key, specs in (("prefix", prefix), ("cycle", cycle)):
            if not isinstance(specs, Sequence) or isinstance(specs, str):
                raise ValueError(f"{path}.{key} must be a list of layers; got {specs!r}.")
            for i, spec in enumerate(specs):
                parse_layer(spec, f"{path}.{key}[{i}]")
        return cls(tuple(prefix), tuple(cycle))

    @classmethod
    def from_layers(cls, layers: Sequence[str]) -> LayerPattern:
        """The shortest cycle that gives exactly `layers` (one spec per layer); all-default -> empty."""
        layers = list(layers)
        if not layers or all(spec == layers[0] for spec in layers) and not layers[0]:
            return cls()
        for period in range(1, len(layers) + 1):
            if all(layers[i] == layers[i % period] for i in range(len(layers))):
                return cls((), tuple(layers[:period]))
        raise AssertionError("unreachable: the full list is its own cycle")

    def to_data(self) -> list[str] | dict[str, list[str]]:
        return {"prefix": list(self.prefix), "cycle": list(self.cycle)} if self.prefix else list(self.cycle)

    def tags(self, index: int) -> frozenset[str]:
        """The tags of layer `index` (0-based within its stack)."""
        if index < len(self.prefix):
            return parse_layer(self.prefix[index], "model.layer_pattern.prefix")
        if not self.cycle:
            return frozenset()
        return parse_layer(self.cycle[(index - len(self.prefix)) % len(self.cycle)], "model.layer_pattern")

    def expanded(self, depth: int) -> list[str]:
        """One spec per layer of a `depth`-layer stack, tags sorted: two patterns that build the same layers
        expand alike ({prefix: [dense], cycle: [moe]} and [dense, moe] over 2 layers)."""
        return ["+".join(sorted(self.tags(i))) for i in range(depth)]

    def says(self, index: int, yes: str, no: str, default: bool) -> bool:
        """Whether layer `index` has tag `yes` (or not `no`), else `default`."""
        tags = self.tags(index)
        return True if yes in tags else False if no in tags else default

    def uses(self, tag: str) -> bool:
        return any(tag in parse_layer(s, "model.layer_pattern") for s in self.prefix + self.cycle)


def check_layers(cfg, rotates: bool) -> None:
    """What the tags say with the rest of the config: a mixer tag needs `model.linear_mixer`, a window tag a
    window, a rotary tag a rotating scheme (`rotates`: the chosen scheme's answer), an FFN tag ffn=moe
    (ValueError naming the key); a linear mixer no layer runs is refused."""
    pattern, scheme = cfg.layer_pattern, f"model.positional={cfg.positional.name} does not rotate"
    needs = {**{tag: (cfg.linear_mixer is not None, "model.linear_mixer (the mixer of the linear layers)")
                for tag in ("full", "linear")},
             "local": (getattr(cfg.mixer, "sliding_window", None) is not None,
                       "model.mixer.sliding_window (the window of the local layers)"),
             "global": (getattr(cfg.mixer, "sliding_window", None) is not None,
                        "model.mixer.sliding_window (without one every layer is global)"),
             "nope": (rotates, f"a rotary scheme ({scheme})"),
             "rope": (rotates, f"a rotary scheme ({scheme})"),
             **{tag: (cfg.ffn.name == "moe", "model.ffn=moe") for tag in ("moe", "dense")}}
    for tag, (held, what) in needs.items():
        if pattern.uses(tag) and not held:
            raise ValueError(f"model.layer_pattern={pattern.to_data()} tags layers {tag!r}, which needs "
                             f"{what}.")
    depth = max(cfg.n_encoder_layers, cfg.n_decoder_layers)
    if cfg.linear_mixer is not None and not any(cfg.layer_is_linear(i) for i in range(depth)):
        raise ValueError(f"model.linear_mixer={cfg.linear_mixer.name} is set but model.layer_pattern="
                         f"{pattern.to_data()} tags none of the {depth} layers linear, so no layer would run "
                         "it; tag some layers linear (Qwen3-Next: [linear, linear, linear, full]) or drop "
                         "model.linear_mixer (null).")
