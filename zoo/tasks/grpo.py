"""Online RL with verifiable rewards (``task=grpo``): a decoder samples `grpo.num_generations` completions per
prompt (``data=prompts``) with zoo's own decoding (`grpo.rollout`: model.generate or the continuous-batching
engine, zoo.tasks.grpo_rollouts), the `grpo.rewards` score them (zoo.tasks.rewards), group-relative advantages
weigh them, and the policy takes `grpo.num_iterations` optimisation steps on each generation batch with the
`grpo.loss_type` loss (zoo.tasks.grpo_losses: clipped ratio, optional KL to the reference: with LoRA adapters
the model with them off, else a frozen copy). Metrics under trl's names: reward, reward_std,
rewards/<name>/mean|std, frac_reward_zero_std, completions/mean_length|min_length|max_length|clipped_ratio,
entropy, kl, clip_ratio/*; besides them time/generation_s, time/step_s and rollout_tokens_per_s (the rollout's
cost beside the update's)."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
import types
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torchmetrics import Metric

from zoo.data.prompt_batches import PromptDataModule
from zoo.data.prompts import turn_end_id
from zoo.finetune.lora import LoRALinear
from zoo.tasks.base import Task, register
from zoo.tasks.dpo import reference_of
from zoo.tasks.grpo_batch import RolloutBatch, completion_logps, completion_text, cut_completion, pad_rows
from zoo.tasks.grpo_logs import ROLLOUT, RolloutMean, rollout_table
from zoo.tasks.grpo_losses import (
    GRPO_LOSSES,
    Rollouts,
    entropy,
    group_advantages,
    grpo_loss,
    loss_metrics,
    token_logps,
)
from zoo.tasks.grpo_ranks import gather_objects, gather_rows, largest, token_means
from zoo.tasks.grpo_rollouts import ROLLOUTS, Prompts, Sampling
from zoo.tasks.grpo_settings import GRPOSettings, grpo_settings
from zoo.tasks.rewards import Reward, build_rewards, reward_metrics, score, weighted
from zoo.tasks.samples import Sample, SampleReport

SETTINGS = "grpo"  # task_state key: the run's grpo.* settings (what evaluate.py scores with)


@register
class GroupRelativePolicyOptimisation(Task):
    name = "grpo"
    archs = ("decoder",)
    auto = False
    builtin_data = None
    user_data = "data=prompts data.path=prompts.jsonl"
    corpus_kind = "prompts"
    perplexity = False  # a policy-gradient loss, not a per-token cross-entropy
    settings_group = "grpo"
    refused_strategies = types.MappingProxyType({
        "fsdp_tp": "its rollout metrics and loss weights are gathered over the default process group, "
                   "which under tensor parallelism also holds the ranks that share a batch; use "
                   "trainer=ddp or trainer=fsdp"})

    def settings(self, given: Mapping[str, Any]) -> GRPOSettings:
        return grpo_settings(given)

    def check_chosen(self, given: Mapping[str, Any]) -> None:
        """A run needs at least one reward."""
        settings = self.settings(given)
        build_rewards(settings.rewards, settings.reward_weights)

    def for_model(self, model: nn.Module, given: Mapping[str, Any]) -> GRPORun:
        """The task bound to `model`, its rewards and (grpo.beta > 0) its reference: the model with its LoRA
        adapters off, else a frozen copy of it as it is now."""
        settings = self.settings(given)
        rewards = build_rewards(settings.rewards, settings.reward_weights)
        has_lora = any(isinstance(m, LoRALinear) for m in model.modules())
        reference = copy.deepcopy(model).eval().requires_grad_(False) if settings.beta and not has_lora \
            else None
        return GRPORun(model, reference, settings, rewards)

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> PromptDataModule:
        names = ("prompt", "fields", "conversational")
        parts = {split: tuple(entry.arrays[f"{split}.{name}"] for name in names)
                 for split in ("train", "val")}
        return PromptDataModule(entry.tokenizer, parts, **common)

    def loss(self, out, batch: Mapping[str, Any]) -> torch.Tensor:
        raise ValueError("task=grpo scores its own rollouts: use the task bound to the model "
                         "(GroupRelativePolicyOptimisation.for_model), as ZooLightningModule does")

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        raise ValueError("task=grpo samples stop where its rollouts stop (grpo.stop_strings): use the task "
                         "bound to the model (GroupRelativePolicyOptimisation.for_model)")

    def for_evaluation(self, model: nn.Module, state: Mapping[str, Any] | None, reference=None) -> GRPORun:
        """The run's grpo.* settings and rewards (kept in the checkpoint), without a KL term."""
        super().for_evaluation(model, state, reference)  # reference= is refused
        if not (state or {}).get(SETTINGS):
            raise ValueError("this task=grpo checkpoint does not record its grpo.* settings (its rewards), "
                             "so its rollouts cannot be scored as trained")
        settings = dataclasses.replace(self.settings(state[SETTINGS]), beta=0.0)
        return GRPORun(model, None, settings, build_rewards(settings.rewards, settings.reward_weights))

    def evaluate(self, model, tokenizer, datamodule, split: str, options) -> dict[str, float]:
        raise ValueError("evaluate.py scores task=grpo with the run's rewards: use the task of the "
                         "checkpoint (for_evaluation)")


class GRPORun(GroupRelativePolicyOptimisation):
    """task=grpo bound to one run's policy, reference (None: adapters off, or no KL), settings and rewards."""

    def __init__(self, model: nn.Module, reference: nn.Module | None, settings: GRPOSettings,
                 rewards: list[Reward]) -> None:
        self.model, self.reference, self.grpo, self.rewards = model, reference, settings, rewards
        self.data: PromptDataModule | None = None
        self._rollout: tuple[RolloutBatch, dict[str, torch.Tensor]] | None = None  # reused num_iterations
        self.logged: dict[str, torch.Tensor] = {}  # the latest rollout's metrics (rewards, lengths, times)
        self._last_step_at: float | None = None
        self._seed = 0
        self.table: tuple[list[str], list[list[Any]]] | None = None  # the latest training rollout's rows

    # ------------------------------------------------------------------------------ checks
    def before_fit(self, datamodule, resuming: bool) -> None:
        """Before the first step: each training batch drawn num_iterations times; every prompt leaves room
        for max_completion_length tokens in the window; every row has the fields its rewards read."""
        self.data, self._seed = datamodule, int(datamodule.seed)
        datamodule.repeat = self.grpo.num_iterations
        window = self.model.config.max_seq_len
        for split, rows in datamodule.datasets.items():
            for i, ids in enumerate(rows.prompts):
                if len(ids) + self.grpo.max_completion_length > window:
                    raise ValueError(f"{datamodule.origin}: {split} prompt {i} has {len(ids)} tokens; with "
                                     f"grpo.max_completion_length={self.grpo.max_completion_length} it needs "
                                     f"{len(ids) + self.grpo.max_completion_length} > model.max_seq_len="
                                     f"{window}: shorten the prompt or lower grpo.max_completion_length")
            for reward in self.rewards:
                for name in reward.fields:
                    missing = [i for i, f in enumerate(rows.fields) if name not in f]
                    if missing:
                        raise ValueError(f"{datamodule.origin}: reward {reward.name} reads field {name!r}, "
                                         f"which {split} row {missing[0]} (and {len(missing) - 1} more) "
                                         "lacks")

    # ------------------------------------------------------------------------------ rollouts
    def stop_ids(self, conversational: bool = False) -> list[int]:
        """The tokens a rollout stops at: the model's eos and, for a conversational prompt (the chat template
        opened the assistant's turn), the token that closes the turn (a chat model ends its reply there:
        Gemma's <end_of_turn> is not its eos). A text prompt opened no turn, so that token does not end it."""
        ends = [self.model.config.eos_id, turn_end_id(self.data.tokenizer) if conversational else None]
        return list(dict.fromkeys(t for t in ends if t is not None))

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """The first `num_shown` validation prompts, the model's sampled completion stopped and cut where a
        rollout's is (its stop tokens, grpo.stop_strings), and the row's fields (what the rewards check it
        against) as the reference."""
        self.data = datamodule
        rows, shown, strings = datamodule.datasets["val"], [], list(self.grpo.stop_strings or ())
        decoding = {k: cfg[k] for k in ("max_new_tokens", "temperature", "top_k")}
        for i in range(min(cfg["num_shown"], len(rows))):
            prompt, stops = rows.prompts[i], self.stop_ids(rows.conversational[i])
            reply = model.generate([prompt], do_sample=True, seed=cfg["seed"] + i, eos_token_id=stops,
                                   stop_strings=strings or None, tokenizer=tokenizer if strings else None,
                                   **decoding)[0]
            new = reply[len(prompt):].tolist()
            completion, _ = cut_completion(new, set(stops), strings, tokenizer.decode)
            shown.append(Sample(tokenizer.decode(prompt),
                                completion_text(completion, stops, strings, tokenizer.decode),
                                json.dumps(rows.fields[i], sort_keys=True)))
        return SampleReport(shown, {})

    def prepare_batch(self, batch: Mapping[str, Any], step: int, training: bool) -> dict[str, Any]:
        """The prompt batch with its rollouts: sampled and scored every num_iterations training steps (and
        for every validation batch), reused in between."""
        now = time.perf_counter()
        step_s = now - self._last_step_at if training and self._last_step_at is not None else None
        if not training or self._rollout is None or step % self.grpo.num_iterations == 0:
            rollout = self._generate(batch, step, "train" if training else "val")
            if training:
                self._rollout = rollout
        else:
            device = batch["prompt_ids"].device  # a rollout taken back from a checkpoint may be on the CPU
            reused = {**self._rollout[1], "time/generation_s": torch.tensor(0.0)}
            rollout = (self._rollout[0].to(device), reused)
        self.logged = {**rollout[1], **({"time/step_s": torch.tensor(step_s)} if step_s is not None else {})}
        if training:
            self._last_step_at = time.perf_counter()
        return {**batch, ROLLOUT: rollout[0]}

    @torch.no_grad()
    def _generate(self, batch: Mapping[str, Any], step: int, split: str
                  ) -> tuple[RolloutBatch, dict[str, torch.Tensor]]:
        s, g, model = self.grpo, self.grpo.num_generations, self.model
        start = time.perf_counter()
        seed = self._seed * 1_000_003 + step * 7919 + int(batch["index"][0]) * 2 + (split == "val")
        chat = self.data.conversational(split, batch["index"].tolist())
        completions, clipped, texts = self._sample(batch["prompt_ids"], batch["prompt_mask"], chat, seed)
        gen_s = time.perf_counter() - start
        prompt_ids = batch["prompt_ids"].repeat_interleave(g, 0)  # (B G, P): each prompt's group together
        prompt_mask = batch["prompt_mask"].repeat_interleave(g, 0)
        index = batch["index"].repeat_interleave(g).tolist()
        tokenizer = self.data.tokenizer
        prompts = [tokenizer.decode(ids[m.bool()].tolist())
                   for ids, m in zip(prompt_ids, prompt_mask, strict=True)]
        rows = self.data.fields(split, index)
        fields = {key: [r.get(key) for r in rows] for key in sorted({k for r in rows for k in r})}
        per_reward = score(self.rewards, prompts, texts, completions, fields)
        advantages = group_advantages(weighted(per_reward, self.rewards), g, s.scale_rewards)
        if split == "train":  # every rank's rows (ranks sample their own prompts), in rank order
            columns, table = rollout_table(step, prompts, texts, per_reward, self.rewards, advantages)
            self.table = (columns, gather_objects(table))
        pad = tokenizer.padding_id
        cid, cmask = pad_rows(completions, pad, "right")
        device = prompt_ids.device
        rollout = RolloutBatch(prompt_ids.clone(), prompt_mask.clone(), cid.to(device), cmask.to(device),
                               advantages.to(device))
        old = completion_logps(model, rollout, s.temperature)[0] if s.num_iterations > 1 else None
        ref = None
        if s.beta:
            with reference_of(model, self.reference) as scorer:
                ref = completion_logps(scorer, rollout, s.temperature)[0]
        lengths, cut = cmask.sum(1).float(), torch.tensor(clipped).float()
        if split == "train":  # the whole generation batch's metrics, over every rank (zoo.tasks.grpo_ranks)
            per_reward, lengths, cut = gather_rows(per_reward, lengths, cut)
            gen_s = largest(gen_s)
        logged = {**reward_metrics(per_reward, self.rewards, g),
                  "completions/mean_length": lengths.mean(), "completions/min_length": lengths.min(),
                  "completions/max_length": lengths.max(), "completions/clipped_ratio": cut.mean(),
                  "time/generation_s": torch.tensor(gen_s),
                  "rollout_tokens_per_s": lengths.sum() / max(gen_s, 1e-9)}
        return rollout.with_logps(old, ref), logged

    def _sample(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, conversational: list[bool],
                seed: int) -> tuple[list[list[int]], list[bool], list[str]]:
        """The B prompts' num_generations completions each (B G rows, each prompt's group together), sampled
        by the grpo.rollout sampler (zoo.tasks.grpo_rollouts): each row's completion (cut after its stop),
        whether it ran to the cap, and its text for the rewards. Conversational and text prompts stop at
        different tokens (stop_ids), so each kind is one call of the sampler (a data set of one kind: one)."""
        s, g, tokenizer = self.grpo, self.grpo.num_generations, self.data.tokenizer
        strings = list(s.stop_strings or ())
        sampling = Sampling(g, s.max_completion_length, s.temperature, s.top_p, s.top_k, tuple(strings))
        sampler = ROLLOUTS.get(s.rollout)
        out: list = [None] * (len(conversational) * g)
        for kind in sorted(set(conversational)):
            prompts = [i for i, c in enumerate(conversational) if c == kind]
            stops = self.stop_ids(kind)
            batch = Prompts(prompt_ids[prompts], prompt_mask[prompts], prompts, stops)
            new_tokens = sampler.sample(self.model, batch, sampling, seed, tokenizer)
            rows = [i * g + j for i in prompts for j in range(g)]
            for row, new in zip(rows, new_tokens, strict=True):
                completion, cut = cut_completion(new, set(stops), strings, tokenizer.decode)
                out[row] = (completion, cut, completion_text(completion, stops, strings, tokenizer.decode))
        completions, clipped, texts = (list(column) for column in zip(*out, strict=True))
        return completions, clipped, texts

    # ------------------------------------------------------------------------------ the update
    def model_inputs(self, batch: Mapping[str, Any]) -> Mapping[str, torch.Tensor]:
        r = batch[ROLLOUT]
        return {"input_ids": torch.cat([r.prompt_ids, r.completion_ids], 1),
                "attention_mask": torch.cat([r.prompt_mask, r.completion_mask], 1)}

    def counted_labels(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """What the loss is a mean over (DDP weighs each rank's loss by it): the loss type's count."""
        return GRPO_LOSSES.get(self.grpo.loss_type).counted(batch[ROLLOUT].completion_mask)

    def rollouts(self, out, batch: Mapping[str, Any]) -> Rollouts:
        r = batch[ROLLOUT]
        logits = out.logits[:, r.prompt_ids.shape[1] - 1:-1]  # (B, C, V): t scores completion token t
        logps = token_logps(logits, r.completion_ids, self.grpo.temperature)
        return Rollouts(logps, r.completion_mask.to(logps), r.advantages.to(logps), r.old_logps, r.ref_logps)

    def loss(self, out, batch: Mapping[str, Any]) -> torch.Tensor:
        return grpo_loss(self.rollouts(out, batch), self.grpo)

    def train_logs(self, out, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        r = self.rollouts(out, batch)
        logits = out.logits[:, batch[ROLLOUT].prompt_ids.shape[1] - 1:-1].detach()
        ent = (entropy(logits, self.grpo.temperature) * r.mask).sum() / r.mask.sum().clamp(min=1)
        return {**self.logged, **token_means({**loss_metrics(r, self.grpo), "entropy": ent}, r.mask.sum())}

    def rollout_samples(self, num_shown: int) -> tuple[list[str], list[list[Any]]] | None:
        """The latest training generation batch (every rank's) as a table (what the `rollouts` callback logs):
        its first `num_shown` completions with their prompt, each reward function's value, the reward and
        advantage."""
        return None if self.table is None else (self.table[0], self.table[1][:num_shown])

    def val_metrics(self, label_names=()) -> dict[str, Metric]:
        names = ["reward", *(f"rewards/{r.name}/mean" for r in self.rewards), "completions/mean_length"]
        return {name: RolloutMean(name, self) for name in names}

    def run_state(self) -> dict[str, Any] | None:
        """The grpo.* settings (evaluate.py scores with its rewards) and the generation batch being optimised
        on (a resume inside it takes the remaining num_iterations steps on the same rollouts)."""
        state: dict[str, Any] = {SETTINGS: {k: list(v) if isinstance(v, tuple) else v
                                            for k, v in dataclasses.asdict(self.grpo).items()}}
        if self._rollout is not None:
            rollout, logged = self._rollout
            state[ROLLOUT] = ({f: getattr(rollout, f) for f in rollout.__dataclass_fields__}, dict(logged))
        return state

    def load_run_state(self, state: Mapping[str, Any] | None) -> None:
        if (state or {}).get(ROLLOUT) is not None:
            fields, logged = state[ROLLOUT]
            self._rollout = (RolloutBatch(**fields), dict(logged))

    def evaluate(self, model, tokenizer, datamodule, split: str, options) -> dict[str, float]:
        """Rollouts of the split's prompts sampled as training samples them (num_generations each), scored by
        the run's rewards: the reward metrics and completion lengths, means over prompts' completions (whole
        batches until options.max_examples prompts are reached)."""
        self.data, totals, seen = datamodule, {}, 0
        device = next(model.parameters()).device
        for batch in getattr(datamodule, f"{split}_dataloader")():
            batch = {k: v.to(device) for k, v in batch.items()}
            rollout, logged = self._generate(batch, 0, "train" if split == "train" else "val")
            n = len(batch["index"])
            for name, value in logged.items():
                if not name.startswith(("time/", "rollout_tokens")):
                    totals[name] = totals.get(name, 0.0) + float(value) * n
            seen += n
            if options.max_examples is not None and seen >= options.max_examples:
                break
        return {**{name: total / max(seen, 1) for name, total in totals.items()}, "examples": seen}
