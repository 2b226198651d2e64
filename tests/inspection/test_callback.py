"""The attention-map callback inside a real (tiny) Lightning run: PNGs for a fixed validation example."""

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

import zoo
from zoo.inspection.callback import AttentionMapLogger

from .configs import VOCAB, config
from .test_plots import assert_png


class TinyLM(L.LightningModule):
    def __init__(self, cfg):
        super().__init__()
        self.model = zoo.build(cfg)

    def training_step(self, batch, _):
        return self.model(**batch).loss

    def validation_step(self, batch, _):
        self.log("val_loss", self.model(**batch).loss)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _batches(n=4, t=8):
    torch.manual_seed(0)
    ids = torch.randint(3, VOCAB, (n, t))
    mask = torch.ones_like(ids)
    mask[0, -2:] = 0  # the example the callback picks is right-padded: the pads must be dropped
    return [{"input_ids": ids[i: i + 2], "attention_mask": mask[i: i + 2], "labels": ids[i: i + 2]}
            for i in range(0, n, 2)]


def test_callback_writes_attention_pngs_each_validation(tmp_path):
    cfg = config("gpt")
    callback = AttentionMapLogger(max_tokens=6, layers=[1])
    trainer = L.Trainer(
        max_epochs=2, limit_train_batches=1, limit_val_batches=1, num_sanity_val_steps=1,
        logger=CSVLogger(tmp_path), callbacks=[callback], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )
    data = _batches()
    trainer.fit(TinyLM(cfg), train_dataloaders=DataLoader(data, batch_size=None),
                val_dataloaders=DataLoader(data, batch_size=None))
    assert callback.example["input_ids"].shape == (1, 6)  # 8 tokens, 2 pads dropped, cut to 6
    written = sorted((tmp_path / "lightning_logs").rglob("*.png"))
    # two epochs, sanity check skipped
    assert [p.name for p in written] == ["attention_decoder_layer1.png"] * 2
    assert written[0].parent != written[1].parent  # one folder per step
    for path in written:
        assert_png(path)


def test_callback_rejects_bad_arguments():
    with pytest.raises(ValueError, match="every_n_epochs"):
        AttentionMapLogger(every_n_epochs=0)


def test_callback_hands_the_pngs_to_a_wandb_logger(tmp_path, monkeypatch):
    """The W&B branch: every written PNG goes to WandbLogger.log_image (recorded here; nothing is sent)."""
    from lightning.pytorch.loggers import WandbLogger

    calls = []
    monkeypatch.setattr(WandbLogger, "log_image",
                        lambda self, key, images, step=None, **kw: calls.append((key, images, step)))
    cfg = config("transformer")
    trainer = L.Trainer(logger=[CSVLogger(tmp_path), WandbLogger(offline=True, save_dir=str(tmp_path))],
                        accelerator="cpu", enable_progress_bar=False, enable_model_summary=False)
    callback = AttentionMapLogger(max_heads=2)
    callback.example = {"input_ids": torch.randint(3, VOCAB, (1, 5)),
                        "decoder_input_ids": torch.randint(3, VOCAB, (1, 3))}
    files = callback.log_maps(trainer, TinyLM(cfg))
    assert sorted(key for key, _, _ in calls) == sorted(
        ["attention/encoder_layer0", "attention/encoder_layer1", "attention/decoder_layer0",
         "attention/cross_layer0"])
    assert sorted(images[0] for _, images, _ in calls) == sorted(str(p) for p in files)
    for path in files:
        assert_png(path)
