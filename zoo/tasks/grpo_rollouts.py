"""`grpo.rollout`: how task=grpo samples a generation batch's completions, a registry of samplers. `generate`
(the default) runs each prompt once through `model.generate` and copies its cache to its group
(num_return_sequences; one generator draws for every row); `engine` submits each completion as a row of zoo's
continuous-batching engine (zoo.generation.continuous), which drops a row once it ends, each row drawing from
its own generator seeded from the batch's seed and the row's index, so its tokens are `model.generate`'s for
that row alone with that seed. Both return raw new tokens; task=grpo cuts them (zoo.tasks.grpo_batch).
docs/finetune.md#grpo measures which is faster at which size."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import nn

from zoo.generation.config import GenerationConfig
from zoo.generation.continuous.engine import Engine, Sequence
from zoo.generation.stopping import RowStop
from zoo.registry import Registry
from zoo.utils import eval_mode


@dataclass(frozen=True)
class Sampling:
    """What every completion of a generation batch is sampled with (task=grpo's grpo.* settings)."""

    generations: int  # completions per prompt (a group)
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int  # 0: off
    stop_strings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prompts:
    """Prompts of one kind (the same stop tokens): left-padded ids and mask (n, P), and each prompt's index in
    the generation batch (its group's rows there are index * generations + j)."""

    ids: torch.Tensor
    mask: torch.Tensor
    index: list[int]
    stop_ids: list[int]


def row_seed(batch_seed: int, row: int) -> int:
    """The seed of row `row` of a generation batch whose seed is `batch_seed` (from the run's seed, the step,
    the batch and the split): the same on a resumed run, different for every row."""
    return (batch_seed * 1_000_003 + row) % 2**63


class RolloutSampler(ABC):
    """One way of sampling a generation batch."""

    @abstractmethod
    def sample(self, model: nn.Module, prompts: Prompts, sampling: Sampling, seed: int, tokenizer
               ) -> list[list[int]]:
        """Each prompt's `generations` completions (n G lists, each prompt's group together): the new tokens,
        through the stop token or stop string that ended the row (anything after it is cut by the caller)."""


ROLLOUTS: Registry[RolloutSampler] = Registry("GRPO rollout sampler", key="grpo.rollout")


def register_rollout(name: str):
    """Class decorator: one instance of the class registered in ROLLOUTS under `name`."""
    def add(cls: type[RolloutSampler]) -> type[RolloutSampler]:
        ROLLOUTS.register(name, cls())
        return cls
    return add


def kind_seed(batch_seed: int, prompts: Prompts, generations: int) -> int:
    """The seed one generate call of a kind of prompts draws with: the batch's seed for the kind holding the
    batch's first row (a batch of one kind, as before), else its first row's seed, so that the chat and text
    prompts of a mixed batch never share a random stream."""
    first = prompts.index[0] * generations
    return batch_seed if first == 0 else row_seed(batch_seed, first)


@register_rollout("generate")
class GenerateRollouts(RolloutSampler):
    """`model.generate` on the prompts, each run once and its cache copied to its group: every row computed
    until the last one ends (finished rows are padded)."""

    def sample(self, model, prompts, sampling, seed, tokenizer):
        strings = list(sampling.stop_strings)
        sequences = model.generate(
            prompts.ids, attention_mask=prompts.mask, num_return_sequences=sampling.generations,
            max_new_tokens=sampling.max_new_tokens, do_sample=True, temperature=sampling.temperature,
            top_p=sampling.top_p, top_k=sampling.top_k, seed=kind_seed(seed, prompts, sampling.generations),
            eos_token_id=prompts.stop_ids,
            stop_strings=strings or None, tokenizer=tokenizer if strings else None)  # (n G, P + new)
        return sequences[:, prompts.ids.shape[1]:].tolist()


@register_rollout("engine")
class EngineRollouts(RolloutSampler):
    """Every completion a row of zoo's continuous-batching engine, stepped in this thread until all ended; a
    row leaves the batch at the step after its stop token, stop string or token cap. Row r (of the generation
    batch) draws from its own generator seeded row_seed(seed, r)."""

    def sample(self, model, prompts, sampling, seed, tokenizer):
        device, g = prompts.ids.device, sampling.generations
        got: list[list[int]] = []
        rows: list[Sequence] = []
        for i, (ids, mask) in enumerate(zip(prompts.ids, prompts.mask, strict=True)):
            prompt = ids[mask.bool()].tolist()
            for j in range(g):
                got.append([])
                choice = GenerationConfig(do_sample=True, temperature=sampling.temperature,
                                          top_p=sampling.top_p, top_k=sampling.top_k,
                                          seed=row_seed(seed, prompts.index[i] * g + j))
                stop = RowStop(sampling.stop_strings, tokenizer.decode) if sampling.stop_strings else None
                rows.append(Sequence(prompt, sampling.max_new_tokens, choice.choice(device),
                                     frozenset(prompts.stop_ids), _collect(got[-1]), stop=stop))
        pad = model.config.pad_id if model.config.pad_id is not None else 0
        engine = Engine(model, pad_id=pad, max_batch=len(rows), max_queue=len(rows))
        with eval_mode(model), torch.inference_mode():  # dropout off while sampling, as generate
            engine.step(rows)
            while not all(row.done for row in rows):
                engine.step([])
        failed = [(k, row.error) for k, row in enumerate(rows) if row.error is not None]
        if failed:
            k, error = failed[0]
            raise RuntimeError(f"grpo.rollout=engine: rollout row {k} of the generation batch (and "
                               f"{len(failed) - 1} more) failed: {error.message}")
        return got


def _collect(tokens: list[int]):
    """An engine row's delivery: append each new token to `tokens`."""
    def deliver(token, finish, logprob) -> None:
        if token is not None:
            tokens.append(token)
    return deliver
