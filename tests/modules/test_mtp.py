"""Multi-token prediction (model.mtp, zoo.modules.mtp) against a hand-written DeepSeek-V3 MTP: module k joins
RMSNorm(embedding of token t + k) and RMSNorm(previous hidden) through eh_proj, runs one more layer over the
first T - k positions, norms it for the shared head and is scored against token t + k + 1; the loss is the
main loss plus weight x the mean over modules. The training step adds it (task=lm, chunked or not);
refusals."""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import Logger

import zoo
from zoo.modules.mask import build_mask
from zoo.training.module import ZooLightningModule

VOCAB, T = 40, 9
TINY = {"arch": "decoder", "vocab_size": VOCAB, "d_model": 16, "n_layers": 2, "n_heads": 2,
        "norm": "rmsnorm", "positional": "rope", "activation": "swiglu", "bias": False,
        "tie_embeddings": False, "max_seq_len": 16,
        "mtp": {"name": "sequential", "depth": 2, "weight": 0.25}}


def _rms(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.eps)


def _reference(model, ids: torch.Tensor, next_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(main loss, weighted MTP loss) written out: module k sees positions 0..T-k-1 only (no placeholder
    tokens), and position t's target is next_tokens[t + k] (token t + k + 1)."""
    out = model(ids, output_mtp=False)
    main = F.cross_entropy(out.logits.flatten(0, 1), next_tokens.flatten(), ignore_index=-100)
    h, losses = out.hidden_states, []
    for k, module in enumerate(model.mtp.layers, start=1):
        n = ids.shape[1] - k
        embedded = model.embed.tokens.weight[ids[:, k:]]  # (B, n, C): token t + k
        joined = torch.cat([_rms(embedded, module.enorm), _rms(h[:, :n], module.hnorm)], -1)
        x = joined @ module.eh_proj.weight.T
        positions = torch.arange(n).expand(ids.shape[0], n)
        terms = model.embed.positional.terms(positions, 0, n, causal=True)
        h, _, _ = module.block(x, build_mask(None, causal=True, q_len=n, k_len=n), terms)
        logits = _rms(h, module.norm) @ model.head.proj.weight.T  # (B, n, V)
        losses.append(F.cross_entropy(logits.flatten(0, 1), next_tokens[:, k:].flatten(), ignore_index=-100))
    return main, model.config.mtp.weight * torch.stack(losses).mean()


def _model(**over):
    torch.manual_seed(0)
    return zoo.build({**TINY, **over})


def test_labels_loss_is_main_plus_weighted_mtp_against_the_reference():
    model = _model()
    ids = torch.randint(0, VOCAB, (3, T), generator=torch.Generator().manual_seed(1))
    next_tokens = F.pad(ids[:, 1:], (0, 1), value=-100)
    model.train()  # dropout 0: training runs the modules
    loss = model(ids, labels=ids).loss
    main, mtp = _reference(model, ids, next_tokens)
    assert mtp > 0.1 * main  # the modules count
    torch.testing.assert_close(loss, main + mtp, rtol=1e-5, atol=1e-5)
    model.eval()  # evaluation: the main head alone
    out = model(ids, labels=ids)
    assert out.mtp_hidden_states is None
    torch.testing.assert_close(out.loss, main, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk", [0, 5], ids=["whole", "chunked"])
def test_module_loss_against_next_token_targets_with_ignored_positions(chunk):
    model = _model(mtp={"name": "sequential", "depth": 2, "weight": 0.5}, tie_embeddings=True)
    gen = torch.Generator().manual_seed(2)
    ids, targets = (torch.randint(0, VOCAB, (2, T), generator=gen) for _ in range(2))
    targets[0, 4] = -100  # a position not trained (an sft prompt token)
    out = model(ids, output_mtp=True)
    got = model.mtp.loss(out.mtp_hidden_states, model.head, targets, chunk)
    _, want = _reference(model, ids, targets)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class _Rows(Logger):
    name, version = "rows", "0"

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, float]] = []

    def log_metrics(self, metrics, step=None) -> None:
        self.rows.append(dict(metrics))

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass


@pytest.mark.parametrize("chunk", [0, 4], ids=["whole", "chunked"])
def test_training_step_adds_the_weighted_mtp_loss(chunk):
    model = _model()
    ids = torch.randint(0, VOCAB, (2, T + 1), generator=torch.Generator().manual_seed(3))
    batch = {"input_ids": ids[:, :-1], "targets": ids[:, 1:]}
    with torch.no_grad():
        main, mtp = _reference(model, batch["input_ids"], batch["targets"])
    module = ZooLightningModule(model, task="lm", tokenizer=None, optim={"lr": 1e-3},
                                scheduler={"name": "constant", "warmup_steps": 0},
                                memory={"loss_chunk_size": chunk} if chunk else None)
    rows = _Rows()
    trainer = L.Trainer(max_steps=1, log_every_n_steps=1, logger=rows, accelerator="cpu",
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader([batch], batch_size=None))
    logged = next(row for row in rows.rows if "train/mtp_loss" in row)
    assert logged["train/loss"] == pytest.approx(main.item(), rel=1e-5)
    assert logged["train/mtp_loss"] == pytest.approx(mtp.item(), rel=1e-5)


def test_modules_are_one_more_layer_of_the_stack_each():
    model = _model(ffn={"name": "moe", "n_experts": 4, "top_k": 2}, layer_pattern={"prefix": ["dense"],
                                                                                   "cycle": ["moe"]})
    assert [type(m.block.ffn).__name__ for m in model.mtp.layers] == [type(model.decoder_stack.layers[1].ffn)
                                                                     .__name__] * 2
    names = {n.split(".", 3)[3] for n, _ in model.named_parameters() if n.startswith("mtp.layers.0.")}
    assert {"weight"} <= {n.rsplit(".", 1)[-1] for n in names}
    assert {"enorm.weight", "hnorm.weight", "eh_proj.weight", "norm.weight"} <= names


@pytest.mark.parametrize("over, match", [
    ({"arch": "encoder", "head": "lm"}, r"model.mtp=sequential predicts later tokens of a decoder's own "
                                        r"sequence; model.arch='encoder' has none"),
    ({"head": {"name": "classifier", "num_labels": 2}}, r"model.mtp=sequential shares the vocabulary head "
                                                        r"\(model.head=lm\), but model.head=classifier"),
    ({"mtp": {"name": "sequential", "depth": 0}}, r"model.mtp.depth"),
    ({"mtp": {"name": "sequential", "weight": -1}}, r"model.mtp.weight"),
    ({"mtp": {"name": "sequential", "dept": 2}}, r"model.mtp=sequential has no key 'dept'"),
    ({"mtp": "parallel"}, r"model.mtp.*parallel.*sequential"),
])
def test_bad_settings_are_one_error_naming_the_key(over, match):
    with pytest.raises(ValueError, match=match):
        zoo.build({**TINY, **over})


def test_output_mtp_needs_the_modules_and_no_cache():
    with pytest.raises(ValueError, match="output_mtp=True needs model.mtp"):
        zoo.build({**TINY, "mtp": None})(torch.ones(1, 3, dtype=torch.long), output_mtp=True)


def test_a_task_without_next_token_targets_refuses_it():
    from zoo.tasks import get_task

    cfg = zoo.config.ModelConfig.from_dict({**TINY, "head": {"name": "classifier", "num_labels": 2},
                                            "mtp": "sequential"})
    with pytest.raises(ValueError, match=r"model.mtp=sequential trains on each position's next tokens, which "
                                         r"task=classification does not give; train it with task=lm\|sft"):
        get_task("classification").check_model(cfg)
