"""Direct preference optimisation (``task=dpo``): a decoder trained on preference pairs (``data=preference``)
to prefer each chosen completion over the rejected one, relative to a reference model, by the ``dpo.*``
settings (zoo.tasks.dpo_losses: loss type, beta, RPO's SFT term). The reference is the model as training
starts: with LoRA adapters, the same model with them off (no second copy in memory), else a frozen copy; or
(dpo.reference=precomputed) each pair's reference log-probs computed once before the first step, carried by
the batches and kept in the checkpoint for a resume (no reference model in memory while training).
Metrics: trl's six reward metrics (rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins,
logps/chosen, logps/rejected) on train and validation."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torchmetrics import Metric

from zoo.data.preference_batches import PreferenceDataModule
from zoo.finetune.lora import LoRALinear
from zoo.tasks.base import Task, register
from zoo.tasks.dpo_losses import DPOSettings, PairLogps, dpo_loss, dpo_settings, reward_metrics
from zoo.tasks.preference import adapters_off, completion_logps, reference_logps
from zoo.tasks.samples import Sample, SampleReport
from zoo.utils import eval_mode

NEEDS_REFERENCE = ("evaluate.py scores task=dpo pairs against the reference model, which the checkpoint does "
                   "not hold: give reference=<the model the DPO run started from: its init_from folder or "
                   "checkpoint>")
CACHED = "reference_logps"  # task_state key: split -> (N, 2) reference log-probs (chosen, rejected)
SETTINGS = "dpo"  # task_state key: the run's dpo.* settings (what evaluate.py scores with)
REWARD_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
                  "logps/chosen", "logps/rejected")


class RewardMean(Metric):
    """One reward metric's mean over validation pairs (each batch weighed by its pairs)."""

    full_state_update = False

    def __init__(self, name: str, run: DirectPreference) -> None:
        super().__init__()
        self.name, self.run = name, run
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("pairs", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, out, batch: Mapping[str, torch.Tensor]) -> None:
        pairs = self.run.pairs(out, batch)
        n = pairs.chosen.shape[0]
        self.total += reward_metrics(pairs, self.run.dpo.beta)[self.name].float() * n
        self.pairs += n

    def compute(self) -> torch.Tensor:
        return self.total / self.pairs


@contextlib.contextmanager
def reference_of(model: nn.Module, reference: nn.Module | None) -> Iterator[nn.Module]:
    """The reference to score with, without gradients and in eval mode (dropout off): the frozen copy, or
    `model` with its LoRA adapters off (its train/eval mode restored on exit)."""
    if reference is not None:
        with torch.no_grad():
            yield reference
        return
    training = model.training
    try:
        with torch.no_grad(), adapters_off(model):
            yield model.eval()
    finally:
        model.train(training)


@register
class DirectPreference(Task):
    name = "dpo"
    archs = ("decoder",)
    auto = False
    builtin_data = None
    user_data = "data=preference data.path=pairs.jsonl"
    corpus_kind = "preference"
    perplexity = False  # a preference loss, not a per-token cross-entropy
    needed_specials = (("eos",),)  # each completion ends with eos (trl's encoding)
    settings_group = "dpo"

    def settings(self, given: Mapping[str, Any]) -> DPOSettings:
        return dpo_settings(given)

    def for_model(self, model: nn.Module, given: Mapping[str, Any]) -> DPORun:
        """The task bound to `model` and its reference (LoRA adapters off when it has some, else a frozen
        copy of it as it is now)."""
        settings = self.settings(given)
        if settings.reference == "precomputed" or any(isinstance(m, LoRALinear) for m in model.modules()):
            reference = None
        else:
            reference = copy.deepcopy(model).eval().requires_grad_(False)
        return DPORun(model, reference, settings)

    def check_resumed(self, checkpoint: Mapping[str, Any], given: Mapping[str, Any]) -> None:
        """dpo.reference=precomputed resumes only a checkpoint that holds the log-probs: its model is no
        longer the reference."""
        if self.settings(given).reference == "precomputed" and \
                not (checkpoint.get("task_state") or {}).get(CACHED):
            raise ValueError("dpo.reference=precomputed, but the checkpoint holds no precomputed reference "
                             "log-probs (it was trained with dpo.reference=live), and its weights have moved "
                             "from the reference; resume it with dpo.reference=live")

    def with_epoch(self, data_cfg: dict[str, Any], examples_per_eval: int) -> dict[str, Any]:
        return data_cfg  # a finite set of pairs: one epoch is one pass

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> PreferenceDataModule:
        parts = {split: tuple(entry.arrays[f"{split}.{part}"] for part in ("prompt", "chosen", "rejected"))
                 for split in ("train", "val")}
        return PreferenceDataModule(entry.tokenizer, parts, **common)

    def model_inputs(self, batch: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    def counted_labels(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The batch's pairs: the loss is a mean over pairs."""
        return torch.tensor(batch["input_ids"].shape[0] // 2, device=batch["input_ids"].device)

    def val_metrics(self, label_names=()) -> dict[str, Metric]:
        return {name: RewardMean(name, self) for name in REWARD_METRICS}  # logged as val/<trl's name>

    def pairs(self, out, batch: Mapping[str, torch.Tensor], model: nn.Module | None = None) -> PairLogps:
        return self.loss(out, batch)

    def loss(self, out, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        raise ValueError("task=dpo scores pairs against a reference model: use the task bound to the model "
                         "(DirectPreference.for_model), as ZooLightningModule does")

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """The first `num_shown` validation prompts, the model's sampled completion, and the chosen one as
        the reference."""
        pairs, shown = datamodule.datasets["val"].pairs, []
        decoding = {k: cfg[k] for k in ("max_new_tokens", "temperature", "top_k")}
        for i, pair in enumerate(pairs[: cfg["num_shown"]]):
            prompt = pair.prompt or [tokenizer.eos_id]
            reply = model.generate([prompt], do_sample=True, seed=cfg["seed"] + i, **decoding)[0]
            shown.append(Sample(tokenizer.decode(prompt), tokenizer.decode(reply[len(prompt):]),
                                tokenizer.decode(pair.chosen)))
        return SampleReport(shown, {})

    def for_evaluation(self, model: nn.Module, state: Mapping[str, Any] | None, reference=None) -> DPORun:
        """The run's dpo.* settings (kept in the checkpoint) with `reference` scored live."""
        if reference is None:
            raise ValueError(NEEDS_REFERENCE)
        if not (state or {}).get(SETTINGS):
            raise ValueError("this task=dpo checkpoint does not record its dpo.* settings (saved before "
                             "zoo kept them), so its loss and rewards cannot be scored as trained; train it "
                             "again, or resume it for a step with this zoo")
        settings = dataclasses.replace(self.settings(state[SETTINGS]), reference="live")
        return DPORun(model, reference.eval().requires_grad_(False), settings)

    def evaluate(self, model, tokenizer, datamodule, split: str, options) -> dict[str, float]:
        raise ValueError(NEEDS_REFERENCE)


class DPORun(DirectPreference):
    """task=dpo bound to one run's policy model, its reference (None: the policy with its LoRA adapters off)
    and its dpo.* settings."""

    def __init__(self, model: nn.Module, reference: nn.Module | None, settings: DPOSettings) -> None:
        self.model, self.reference, self.dpo = model, reference, settings
        self._last: tuple[Any, PairLogps] | None = None  # (weakref to a model output, its pairs)
        self.cached: dict[str, torch.Tensor] | None = None  # dpo.reference=precomputed: split -> (N, 2)
        self._data = None  # the data module the cached values go to (before_fit)

    def before_fit(self, datamodule, resuming: bool) -> None:
        """dpo.reference=precomputed: score every pair of each split with the model as it starts (unless the
        resumed checkpoint brings the values) and hand them to the splits' pairs."""
        if self.dpo.reference != "precomputed":
            return
        self._data = datamodule
        if not resuming:
            self.cached = {split: reference_logps(self.model, pairs.pairs, datamodule.collate,
                                                  datamodule.batch_size)
                           for split, pairs in datamodule.datasets.items()}
        self._hand_over()

    def run_state(self) -> dict[str, Any] | None:
        """The dpo.* settings (evaluate.py scores with them) and the precomputed log-probs, if any."""
        return {SETTINGS: dataclasses.asdict(self.dpo), **({CACHED: self.cached} if self.cached else {})}

    def load_run_state(self, state: Mapping[str, Any] | None) -> None:
        if self.dpo.reference == "precomputed":
            if not (state or {}).get(CACHED):
                raise ValueError("dpo.reference=precomputed: the resumed checkpoint holds no reference "
                                 "log-probs; resume it with dpo.reference=live")
            self.cached = dict(state[CACHED])
            self._hand_over()

    def _hand_over(self) -> None:
        """The cached log-probs to the data module's splits, once both are known (a checkpoint may be loaded
        before or after the fit starts, by strategy)."""
        if self.cached is None or self._data is None:
            return
        for split, pairs in self._data.datasets.items():
            if split not in self.cached:
                raise ValueError(f"dpo.reference=precomputed: no reference log-probs for the {split} pairs")
            pairs.with_reference(self.cached[split])

    def pairs(self, out, batch: Mapping[str, torch.Tensor], model: nn.Module | None = None) -> PairLogps:
        """The batch's pairs scored by the policy (`out`, with gradients) and the reference; kept for the
        same `out` (the loss, train_logs and the validation metrics each ask)."""
        if self._last is not None and self._last[0]() is out:
            return self._last[1]
        logps, tokens = completion_logps(out.logits, batch)
        if "ref_chosen_logps" in batch:  # precomputed before training (before_fit)
            ref = torch.cat([batch["ref_chosen_logps"], batch["ref_rejected_logps"]]).to(logps)
        elif self.dpo.reference == "precomputed":
            raise ValueError("dpo.reference=precomputed: this batch carries no reference log-probs (they are "
                             "computed before the first step: DPORun.before_fit)")
        else:
            ref = self._live_reference(batch, model or self.model, logps.device)
        n = logps.shape[0] // 2
        pairs = PairLogps(logps[:n], logps[n:], ref[:n], ref[n:], tokens[:n].to(logps), tokens[n:].to(logps))
        self._last = (weakref.ref(out), pairs)
        return pairs

    def _live_reference(self, batch: Mapping[str, torch.Tensor], model: nn.Module, device) -> torch.Tensor:
        reference = self.reference
        if reference is not None and next(reference.parameters()).device != device:
            reference.to(device)
        with reference_of(model, reference) as scorer:
            return completion_logps(scorer(**self.model_inputs(batch)).logits, batch)[0]

    def loss(self, out, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The mean over the batch's pairs of the dpo.loss_type loss (+ dpo.sft_weight times the SFT term)."""
        return dpo_loss(self.pairs(out, batch), self.dpo)

    def train_logs(self, out, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return reward_metrics(self.pairs(out, batch), self.dpo.beta)

    def evaluate(self, model, tokenizer, datamodule, split: str, options) -> dict[str, float]:
        """The loss and the six reward metrics over the split's pairs, means over pairs (whole batches until
        options.max_examples pairs are reached)."""
        device = next(model.parameters()).device
        totals: dict[str, float] = {}
        seen, left = 0, options.max_examples
        with eval_mode(model), torch.no_grad():
            for batch in getattr(datamodule, f"{split}_dataloader")():
                batch = {k: v.to(device) for k, v in batch.items()}
                out = model(**self.model_inputs(batch))
                pairs = self.pairs(out, batch, model)
                n = pairs.chosen.shape[0]
                values = {"loss": dpo_loss(pairs, self.dpo), **reward_metrics(pairs, self.dpo.beta)}
                for name, value in values.items():
                    totals[name] = totals.get(name, 0.0) + float(value) * n
                seen += n
                if left is not None and seen >= left:
                    break
        return {**{name: total / max(seen, 1) for name, total in totals.items()}, "pairs": seen}
