"""task=sft step for step against trl: a tiny zoo Llama exported to a Hugging Face folder (zoo.pretrained
save_pretrained) with a ChatML template that marks the assistant with {% generation %}; trl's SFTTrainer
(assistant_only_loss=True, SGD, constant learning rate, no clipping, fp32, in file order) trains the HF copy
while zoo trains its own model on the same rows, two per step, packed into one window by data=chat's code
(zoo.data.chat_masks + chat_packing) and scored by task=sft's loss. The losses agree at each of 10 steps.
zoo's side is driven by hand (the rows, the window, the loss, torch's SGD), not through train.py's loop."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.tasks.test_sft_masks import MARKED
from tests.tokenizers import test_chat
from tests.tokenizers.chat_templates import FAMILIES
from tests.tokenizers.test_chat import write_folder
from zoo.config import ModelConfig
from zoo.data.cache import RaggedIds
from zoo.data.chat_masks import encode_row
from zoo.data.chat_packing import PackedChat
from zoo.data.chat_rows import read_row
from zoo.models import build_model
from zoo.tasks import get_task
from zoo.tokenizers import load_hf_tokenizer

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

STEPS, BATCH, LR = 10, 2, 0.5
ROWS = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{a}+{b}?"},
                      {"role": "assistant", "content": f"{a + b}"}, {"role": "user", "content": "Sure?"},
                      {"role": "assistant", "content": "Yes."}] if a % 2 else
         [{"role": "user", "content": f"{a}+{b}?"}, {"role": "assistant", "content": f"It is {a + b}."}]}
        for a, b in zip(range(STEPS * BATCH), range(3, 3 + STEPS * BATCH), strict=True)]


def zoo_losses(model, tok) -> list[float]:
    """task=sft's loss per step on rows [2k, 2k + 1] packed into one window, SGD steps between."""
    task, optim = get_task("sft"), torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        encoded = [encode_row(tok, read_row(r, f"x:{i}"), "assistant_only")
                   for i, r in enumerate(ROWS[step * BATCH: (step + 1) * BATCH])]
        window = PackedChat(RaggedIds.from_rows([i for i, _ in encoded], np.int64),
                            RaggedIds.from_rows([m for _, m in encoded], np.int64),
                            np.arange(BATCH), 512, truncate=False, origin="rows")
        assert len(window) == 1  # both rows in one window, kept apart by document_ids
        batch = {k: v[None] for k, v in window[0].items()}
        loss = task.loss(model(**task.model_inputs(batch)), batch)
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    return losses


def trl_losses(folder: Path, out: Path) -> list[float]:
    class InOrder(trl.SFTTrainer):  # the rows in file order, as zoo's steps take them
        def _get_train_sampler(self, *args, **kwargs):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    config = trl.SFTConfig(output_dir=str(out), assistant_only_loss=True, per_device_train_batch_size=BATCH,
                           max_steps=STEPS, learning_rate=LR, lr_scheduler_type="constant", optim="sgd",
                           weight_decay=0.0, max_grad_norm=0.0, warmup_steps=0, logging_steps=1,
                           report_to=[], save_strategy="no", use_cpu=True, seed=0, packing=False,
                           max_length=None, bf16=False, fp16=False,  # trl defaults: bf16 autocast,
                           gradient_checkpointing=False)  # checkpointing (embedding gradients)
    trainer = InOrder(model=model, args=config, train_dataset=datasets.Dataset.from_list(ROWS),
                      processing_class=transformers.AutoTokenizer.from_pretrained(str(folder)))
    trainer.train()
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


@pytest.mark.e2e  # trl's trainer start-up: a few seconds
def test_sft_losses_match_trl_step_for_step(tmp_path: Path) -> None:
    from zoo.pretrained.api import save_pretrained

    # Qwen2.5's special tokens: its pad (<|endoftext|>) is not written by the template. Hugging Face's Llama
    # embeds with padding_idx=pad_token_id, which never updates that row; with SmolLM's pad = <|im_end|>, a
    # trained token, the two models would part after the first step for that reason alone
    qwen = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok_folder = write_folder(test_chat.base_tokenizer.__wrapped__(), qwen, tmp_path / "tok",
                              config_template=MARKED)
    tok = load_hf_tokenizer(tok_folder)
    cfg = ModelConfig(arch="decoder", d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                      activation="swiglu", norm="rmsnorm", positional="rope", bias=False, max_seq_len=512,
                      dropout=0.0, tie_embeddings=False)
    torch.manual_seed(0)
    model = build_model(get_task("sft").model_config(cfg, tok))
    save_pretrained(model, tmp_path / "hf", model_type="llama")
    tok.save_hf(tmp_path / "hf")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    theirs = trl_losses(tmp_path / "hf", tmp_path / "trl")
    ours = zoo_losses(model.train(), tok)
    assert len(theirs) == STEPS
    gap = max(abs(a - b) for a, b in zip(ours, theirs, strict=True))
    print(f"sft vs trl: max |loss difference| over {STEPS} steps {gap:.2e}")  # 8.1e-06 here
    assert ours == pytest.approx(theirs, abs=1e-4)
    assert ours[-1] < ours[0]  # it trains
