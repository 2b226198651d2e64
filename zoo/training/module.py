"""ZooLightningModule: training/validation steps for any `zoo.build` model. The task (zoo/tasks/) says what
of a batch the model is called with, how a batch's loss is computed and weighed, which loss is trained and
which metrics are logged. Checkpoints get a plain-data `zoo` section (zoo.checkpoint.CheckpointRecord: model
config, task name, tokenizer, RNG states, what trains)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
from torchmetrics import Metric

from zoo.checkpoint import CheckpointRecord, set_rng_states, zoo_section
from zoo.finetune.resume import training_record
from zoo.modules.checkpointing import set_activation_checkpointing
from zoo.modules.moe import auxiliary_loss, moe_layers, record_load, routing_summary, update_routers
from zoo.modules.unfused import tensor_layout
from zoo.tasks import Task, get_task
from zoo.tokenizers.texts import tokenizer_texts
from zoo.training.compiling import compile_model, wants_compile
from zoo.training.console import token_count
from zoo.training.loggers import run_id
from zoo.training.optim import build_optimizer, build_scheduler
from zoo.training.tensor_parallel import total_grad_norm

MAX_LOG_PPL = 50  # perplexity is logged as exp(min(loss, this)): a diverging loss gives a large finite number


class ValidationLoss(Metric):
    """Label-weighted mean of batch losses that keeps a NaN/inf batch in the average (torchmetrics'
    MeanMetric drops NaN batches, and its nan_strategy="disable" drops the weights) and counts such batches.
    A batch with nothing to count (weight 0, loss 0/0) adds nothing."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        for name in ("total", "weight", "batches", "non_finite"):
            self.add_state(name, default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, loss: torch.Tensor, weight: torch.Tensor) -> None:
        counted = weight > 0
        loss = torch.where(counted, loss.float(), 0.0)  # no host sync: a 0-weight batch's NaN is no real one
        self.total += loss * weight
        self.weight += weight
        self.batches += counted.float()
        self.non_finite += (~torch.isfinite(loss)).float()

    def compute(self) -> dict[str, torch.Tensor]:
        """{"loss": weighted mean, "batches": batches counted, "non_finite": batches with a NaN/inf loss}."""
        return {"loss": self.total / self.weight, "batches": self.batches, "non_finite": self.non_finite}


class HostCheckedInputs(L.Callback):
    """While fitting, the model's forward skips its value checks (ids, labels, document ids):
    ZooLightningModule checks every batch on the host (on_before_batch_transfer). Switched back on at the end
    of fit, also when fit raises."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.model.inputs_checked_on_host = True

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.model.inputs_checked_on_host = False

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
                     ) -> None:
        pl_module.model.inputs_checked_on_host = False


class ZooLightningModule(L.LightningModule):
    """Wraps a zoo model for one task (a registered Task or its name: lm | mlm | seq2seq | classification)."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        task: Task | str,
        tokenizer,
        optim: Mapping[str, Any],
        scheduler: Mapping[str, Any],
        label_smoothing: float = 0.0,
        compile_cfg: Mapping[str, Any] | None = None,
        seed: int = 0,
        memory: Mapping[str, Any] | None = None,
        task_settings: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        # the task bound to this model with its settings group (task_settings: dpo.*); dpo: its reference
        self.task = get_task(task).for_model(model, task_settings or {})
        self.task.check_label_smoothing(label_smoothing)
        self.model = model
        self.tokenizer = tokenizer
        self.optim_cfg, self.scheduler_cfg = dict(optim), dict(scheduler)
        self.label_smoothing = float(label_smoothing)
        self.seed = int(seed)
        self.val_loss = ValidationLoss()
        # found once: a dense model skips the per-step MoE work (balancing losses, load, routers, summary)
        self.has_moe = bool(moe_layers(model))
        self.val_non_finite: tuple[int, int] = (0, 0)  # (non-finite, counted) batches of the last validation
        label_names = getattr(tokenizer, "label_names", None) or ()
        self.val_metrics = torch.nn.ModuleDict(self.task.val_metrics(label_names))  # logged as val/<name>
        memory = dict(memory or {})  # the memory.* levers (conf/config.yaml)
        if memory.get("activation_checkpointing"):
            set_activation_checkpointing(model, True)
        self.loss_chunk_size = memory.get("loss_chunk_size")
        if self.loss_chunk_size and not self.task.chunked_loss:
            raise ValueError("memory.loss_chunk_size applies to tasks with a chunked loss, not "
                             f"task={self.task.name}")
        self.compile_cfg = dict(compile_cfg or {})  # compile.*: true compiles now, auto once on the device
        object.__setattr__(self, "_forward", model)  # an alias, no submodule: checkpoints hold model.* once
        if self.compile_cfg.get("enabled") is True:
            self._compile()

    def _compile(self) -> None:
        compiled = compile_model(self.model, self.compile_cfg)
        object.__setattr__(self, "_forward", compiled)  # not a submodule: state_dict keys stay `model.*`

    def setup(self, stage: str) -> None:
        """compile.enabled=auto: compile on the device types where it pays off (zoo.training.compiling)."""
        if self._forward is self.model and self.compile_cfg.get("enabled") == "auto" \
                and wants_compile(self.compile_cfg, self.trainer.strategy.root_device):
            self._compile()

    def configure_model(self) -> None:
        """Under a sharding strategy (zoo.training.sharding: trainer.strategy=fsdp), shard the model once the
        processes have started; other strategies have no `parallelize` and leave it as built."""
        parallelize = getattr(self.trainer.strategy, "parallelize", None)
        if parallelize is not None and not hasattr(self.model, "reshard"):  # sharded models have reshard()
            parallelize(self.model)

    def on_fit_start(self) -> None:
        """The task's work before the first step (dpo.reference=precomputed), in the run's precision; a
        resumed run takes it from its checkpoint (on_load_checkpoint)."""
        with self.trainer.precision_plugin.forward_context():
            self.task.before_fit(self.trainer.datamodule, resuming=self.trainer.ckpt_path is not None)

    # ------------------------------------------------------------------------------------ steps
    def on_train_epoch_start(self) -> None:
        """Re-key torch's RNG (dropout) from (seed, epoch): a run resumed from an epoch-end checkpoint
        draws exactly the numbers the uninterrupted run draws, whatever happened in between (loading,
        sanity validation, dataloader start-up)."""
        torch.manual_seed(self.seed * 1_000_003 + self.current_epoch)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        batch = self.task.prepare_batch(batch, self.global_step, training=True)  # grpo: its rollouts
        inputs = self.task.model_inputs(batch)
        self.trained_tokens = token_count(inputs)  # train/tokens_per_s counts these (grpo: prompt + reply)
        if self.loss_chunk_size:
            out = self._forward(**inputs, skip_head=True)
            loss = self.task.loss_from_hidden(out.hidden_states, self.model.head, batch, self.loss_chunk_size)
        else:
            out = self._forward(**inputs)
            loss = self.task.training_loss(out, batch, self.label_smoothing)
        loss = self._global_mean(loss, batch)
        trained = self._with_balancing_losses(loss)
        if out.mtp_hidden_states is not None:  # model.mtp: its modules' weighted loss (zoo.modules.mtp)
            mtp_loss = self._global_mean(self.model.mtp.loss(
                out.mtp_hidden_states, self.model.head, self.task.next_token_targets(batch),
                self.loss_chunk_size), batch)
            trained = trained + mtp_loss
            if self._logging_step():
                self.log("train/mtp_loss", mtp_loss, sync_dist=self.trainer.world_size > 1)
        if not self._logging_step():  # Lightning would compute these values and drop them
            return trained
        self.log("train/loss", loss, prog_bar=True, sync_dist=self.trainer.world_size > 1)  # the task's
        if self.task.perplexity and not self.label_smoothing:  # a smoothed loss is no log-perplexity
            self.log("train/ppl", torch.exp(loss.detach().clamp(max=MAX_LOG_PPL)))
        self.log("train/lr", self.optimizers().param_groups[0]["lr"])
        if not self.loss_chunk_size:
            for name, value in self.task.train_logs(out, batch).items():  # sft: token accuracy, tokens
                self.log(f"train/{name}", value)
        if self.has_moe:
            for name, value in routing_summary(self.model).items():  # MoE: load per expert, losses, drops
                self.log(f"train/moe/{name}", value)
        return trained

    def _with_balancing_losses(self, loss: torch.Tensor) -> torch.Tensor:
        """The trained loss: the task's plus the MoE layers' balancing losses of this forward
        (model.ffn.balance); their load is counted for the routers that follow it (updated once per
        optimizer step)."""
        if not self.has_moe:
            return loss
        aux = auxiliary_loss(self.model)
        record_load(self.model)
        return loss if aux is None else loss + aux

    def _chunked_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss with the head run in chunks inside it (memory.loss_chunk_size): no (B, T, V) logits."""
        out = self._forward(**self.task.model_inputs(batch), skip_head=True)
        return self.task.loss_from_hidden(out.hidden_states, self.model.head, batch, self.loss_chunk_size)

    def _logging_step(self) -> bool:
        """Whether this optimizer step's values reach the loggers: Lightning writes them every
        trainer.log_every_n_steps steps (when (steps done + 1) % n == 0, checked before the step counts)."""
        n = self.trainer.log_every_n_steps
        return n > 0 and (self.trainer.global_step + 1) % n == 0

    # ------------------------------------------------------------------------------ input checks
    def configure_callbacks(self) -> list[L.Callback]:
        return [HostCheckedInputs()]

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Check the batch's values (token ids, labels, document ids) on the host, once per batch, before they
        move to the device: bad input gets the model's clear error without a device->host sync (and, compiled,
        a graph break) inside every forward."""
        if isinstance(batch, Mapping):
            self.model.check_values(batch)
        return batch

    def _global_mean(self, loss: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """With several processes, this process's mean `loss` scaled by count * world / global count, so that
        DDP's average of the gradients (and of the logged values) is the mean over every counted label of the
        global batch, as one process computes it, even when the shares differ (seq2seq, data.max_tokens)."""
        world = self.trainer.world_size
        if world == 1:
            return loss
        count = self.task.counted_labels(batch).to(device=loss.device, dtype=torch.float32)
        total = self.all_gather(count).sum()  # (world,) counts -> the global batch's
        return loss * count * world / total.clamp(min=1)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        batch = self.task.prepare_batch(batch, self.global_step, training=False)
        if self.loss_chunk_size and not self.val_metrics:  # metrics read logits; the loss alone needs none
            self.val_loss.update(self._chunked_loss(batch).detach(), self.task.counted_labels(batch))
            return
        out = self._forward(**self.task.model_inputs(batch))  # the same loss as training, unsmoothed
        self.val_loss.update(self.task.loss(out, batch).detach(), self.task.counted_labels(batch))
        for metric in self.val_metrics.values():
            metric.update(out, batch)

    def on_validation_epoch_end(self) -> None:
        summary = self.val_loss.compute()
        loss = summary["loss"]
        self.val_non_finite = (int(summary["non_finite"]), int(summary["batches"]))
        self.log("val/loss", loss, prog_bar=True)  # NaN/inf when any batch was: reported, never best
        if self.task.perplexity:
            self.log("val/ppl", torch.exp(loss.clamp(max=MAX_LOG_PPL)))
        for name, metric in self.val_metrics.items():
            self.log(f"val/{name}", metric.compute())
            metric.reset()
        self.val_loss.reset()

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Global L2 norm of the (unscaled, pre-clipping) gradients, on logging steps only (one fused
        norm over all tensors: a per-tensor loop here cost ~5% of a CPU training step)."""
        if self.has_moe:
            update_routers(self.model)  # MoE sigmoid_bias routers: the bias follows this step's load
        if not self._logging_step():  # called before the step counts, like training_step
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads:
            self.log("train/grad_norm", total_grad_norm(grads))  # sharded ones too (DTensors, 2-D mesh)

    # ------------------------------------------------------------------------------- optimizer
    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = build_optimizer(self.model, self.optim_cfg)
        max_steps = self.trainer.max_steps if self.trainer.max_steps > 0 \
            else self.trainer.estimated_stepping_batches
        scheduler = build_scheduler(optimizer, self.scheduler_cfg, int(max_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ----------------------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        wandb_run = run_id(self.loggers) if self._trainer is not None else None  # a resumed run continues it
        checkpoint["zoo"] = zoo_section(self.model.config, self.task.name, self.tokenizer,
                                        tokenizer_files=self.tokenizer_files, wandb_run_id=wandb_run,
                                        hf_model_type=self.model.pretrained_family,
                                        layout=tensor_layout(self.model),  # unfused: tensor parallel
                                        **training_record(self.model))  # what trains (LoRA rebuilt on load)
        task_state = self.task.run_state()  # dpo.reference=precomputed: the reference log-probs
        if task_state is not None:
            checkpoint["task_state"] = task_state

    @functools.cached_property
    def tokenizer_files(self) -> dict[str, str]:
        """The tokenizer as the checkpoints store it, written out once per run (it does not change while
        training; writing it out took ~30 ms of every save)."""
        return tokenizer_texts(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.task.load_run_state(checkpoint.get("task_state"))
        rng = CheckpointRecord.from_dict(checkpoint.get("zoo") or {}).rng
        if rng is not None:  # the generators as they were when it was saved
            set_rng_states(rng)
