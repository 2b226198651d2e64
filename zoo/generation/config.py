"""GenerationConfig: every decoding knob in one validated record (Hugging Face keyword names), and
GENERATION_OPTIONS, the rule of each knob, declared once: the library (`generate`), `generate.py`,
`evaluate.py`'s `generation:` group and the training callbacks that decode (`callbacks.test`,
`callbacks.samples`) check their decoding keys with it, so they share one set of checks and messages."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from zoo.options import ANY, Options, Rule, integer, number, optional, within
from zoo.utils import did_you_mean

if TYPE_CHECKING:  # torch and the logits processors load with the first `choice`: the options need neither
    import torch

    from zoo.generation.logits import Choice

CACHE_IMPLEMENTATIONS = ("dynamic", "static")


@dataclass
class GenerationConfig:
    """Decoding options. `eos_token_id=None` means the model's `config.eos_id`; `[]` never stops early."""

    max_new_tokens: int = 20
    do_sample: bool = False
    temperature: float | None = None  # sampling only; 0 means greedy
    top_k: int | None = None  # sampling only; 0 / None = off
    top_p: float | None = None  # sampling only; in (0, 1]; 1 / None = off
    num_beams: int = 1
    num_return_sequences: int = 1
    length_penalty: float = 1.0  # beam score = sum log p / (generated length ** length_penalty)
    early_stopping: bool = False  # beam search: True stops once num_beams
                                  # hypotheses ended; False: HF's heuristic
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    use_cache: bool = True
    seed: int | None = None
    return_dict: bool = False
    cache_implementation: str | None = None  # "dynamic" (grows) | "static"
                                             # (pre-allocated); None: static iff compile
    compile: bool = False  # torch.compile the one-token decode step (static cache)
    num_assistant_tokens: int = 4  # speculative decoding (assistant_model=...): draft tokens per round

    @property
    def static_cache(self) -> bool:
        """Decode with the pre-allocated cache: asked for, or implied by compile=True."""
        return self.cache_implementation == "static" or (self.compile and self.cache_implementation is None)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> GenerationConfig:
        """Build from keyword arguments; an unknown key raises with a close match and the known keys."""
        known = [f.name for f in fields(cls)]
        for key in kwargs:
            if key not in known:
                hint = did_you_mean(key, known)
                raise ValueError(f"Unknown generation option {key!r}.{hint} Known options: "
                                 f"{', '.join(known)}.")
        return cls(**kwargs)

    def eos_ids(self, default: int) -> list[int]:
        """The stop tokens as a list (None -> the model's eos id)."""
        if self.eos_token_id is None:
            return [default]
        return [self.eos_token_id] if isinstance(self.eos_token_id, int) else list(self.eos_token_id)

    def choice(self, device: torch.device | str) -> Choice:
        """Greedy, or sampling (do_sample, temperature != 0) through temperature / top-k / top-p; a `seed`
        seeds the draws."""
        import torch

        from zoo.generation.logits import Choice, build_processors

        generator = None if self.seed is None else torch.Generator(device=device).manual_seed(self.seed)
        sample = self.do_sample and self.temperature != 0
        return Choice(sample, build_processors(self.temperature, self.top_k, self.top_p), generator)

    def validate(self, vocab_size: int) -> None:
        """Raise ValueError naming the option, the value and what is allowed: each value by its rule
        (GENERATION_OPTIONS), then what the options say together."""
        GENERATION_OPTIONS.check("", {f.name: getattr(self, f.name) for f in fields(self)})
        if self.compile and self.cache_implementation == "dynamic":
            raise ValueError("compile=True decodes with the static cache (fixed shapes); "
                             "cache_implementation='dynamic' cannot be compiled. Drop one of them.")
        ids = [] if self.eos_token_id is None else self.eos_ids(0)
        for name, values in (("eos_token_id", ids),
                             ("pad_token_id", [] if self.pad_token_id is None else [self.pad_token_id])):
            for value in values:
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab_size:
                    raise ValueError(f"{name}={value!r} must be a token id in [0, {vocab_size}).")
        sampling_knobs = {k: getattr(self, k) for k in ("temperature", "top_k", "top_p")
                          if getattr(self, k) is not None}
        if sampling_knobs and not self.do_sample:
            raise ValueError(
                f"{', '.join(f'{k}={v!r}' for k, v in sampling_knobs.items())} only apply when sampling; "
                "pass do_sample=True (or drop them for greedy / beam search)."
            )
        if self.num_beams > 1 and self.do_sample:
            raise ValueError("do_sample=True with num_beams > 1 "
                             "(beam sampling) is not supported; choose one.")
        if self.num_beams > 1 and self.num_return_sequences > self.num_beams:
            raise ValueError(
                f"num_return_sequences={self.num_return_sequences} exceeds num_beams={self.num_beams}; "
                "beam search returns at most num_beams hypotheses per input."
            )
        if self.num_beams == 1 and not self.do_sample and self.num_return_sequences > 1:
            raise ValueError(
                f"num_return_sequences={self.num_return_sequences} with greedy decoding would repeat one "
                "sequence; use do_sample=True or num_beams >= num_return_sequences."
            )


SWITCH = Rule(lambda v: isinstance(v, bool), "True or False")  # a string like "no" would count as True
# Each decoding option's rule; eos_token_id / pad_token_id are checked against the vocabulary in `validate`.
GENERATION_OPTIONS = Options.of(GenerationConfig).extended({
    **{f.name: SWITCH for f in fields(GenerationConfig) if f.type == "bool"},
    "max_new_tokens": integer(0), "num_beams": integer(1), "num_return_sequences": integer(1),
    "temperature": optional(Rule(lambda v: number().test(v) and v >= 0, ""),
                            "a number >= 0 (0 = greedy; null: 1)"),
    "top_k": optional(integer(0)),
    "top_p": optional(within(number(), lambda v: 0 < v <= 1, "in (0, 1] (1 = off)")),
    "length_penalty": number(), "seed": optional(integer(0)), "num_assistant_tokens": integer(1),
    "cache_implementation": optional(Rule(lambda v: v in CACHE_IMPLEMENTATIONS, ""),
                                     "one of dynamic, static (or None: static iff compile=True)"),
    "eos_token_id": ANY, "pad_token_id": ANY,
})
