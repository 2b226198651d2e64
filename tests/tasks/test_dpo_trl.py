"""DPO step for step against trl's DPOTrainer: a tiny zoo Llama exported to Hugging Face (save_pretrained),
the same preference rows, fp32, no dropout, the same AdamW. trl tokenises and collates the rows and computes
its loss with its own code (DPOTrainer.compute_loss: its fused LM head, its frozen reference copy); zoo
builds the batches with zoo.tasks.preference (checked equal to trl's) and computes pair log-probs and
`dpo_loss` on the zoo model and a frozen copy. Each side steps its own model with its own loss; the losses
and trl's reward metrics agree at every step (1e-4).

This drives trl's loss and optimizer steps directly (compute_loss, backward, step), not trl's `train()`
loop: that loop shuffles with its own sampler and schedules the rate, which is the Trainer's business, not
the loss's."""

from __future__ import annotations

import copy

import pytest
import torch

import zoo
from zoo.data.preference import PreferenceRow
from zoo.tasks.dpo_losses import DPOSettings, dpo_loss, reward_metrics
from zoo.tasks.preference import collate_pairs, encode_pair, pair_logps

ROWS = [
    {"prompt": "sky is ", "chosen": "blue", "rejected": "green"},
    {"prompt": "2+2=", "chosen": "4", "rejected": "5"},
    {"chosen": "cats say meow", "rejected": "cats say woof"},  # implicit prompt "cats say" (zoo's cut)
    {"prompt": "hello ", "chosen": "world", "rejected": "there friend"},
    {"prompt": "a b c ", "chosen": "d", "rejected": "z z"},
    {"chosen": "sun is hot", "rejected": "sun is cold"},
    {"prompt": "yes or no? ", "chosen": "yes", "rejected": "no"},
    {"prompt": "x", "chosen": "yz", "rejected": "zy"},
]
STEPS, BATCH, BETA, LR = 10, 2, 0.1, 5e-3  # the first 10 steps: the 8 rows, then again


def char_tokenizer():
    """A character-level Hugging Face fast tokenizer over the rows' characters, with <pad> 0 and <eos> 1."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted({c for row in ROWS for text in row.values() for c in text})
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")


def zoo_row(row: dict) -> PreferenceRow:
    from zoo.data.preference import parse_row
    return parse_row(row, "test")


@pytest.mark.e2e
def test_dpo_loss_and_rewards_equal_trl_step_for_step(tmp_path):
    datasets = pytest.importorskip("datasets")
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    torch.manual_seed(0)
    tokenizer = char_tokenizer()
    model = zoo.build("llama_small", vocab_size=len(tokenizer), d_model=32, n_layers=2, n_heads=4,
                      n_kv_heads=2, d_ff=48, max_seq_len=64, dropout=0.0).float()
    zoo.save_pretrained(model, tmp_path / "hf")
    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    model.train()

    args = DPOConfig(output_dir=str(tmp_path / "trl"), beta=BETA, loss_type=["sigmoid"], report_to=[],
                     per_device_train_batch_size=BATCH, use_cpu=True, max_length=None, bf16=False, fp16=False,
                     dataset_num_proc=None, logging_steps=1)
    parsed = [zoo_row(row) for row in ROWS]  # trl reads one format per data set: every prompt explicit
    data = datasets.Dataset.from_list([{"prompt": r.prompt, "chosen": r.chosen, "rejected": r.rejected}
                                       for r in parsed])
    trainer = DPOTrainer(model=hf_model, args=args, train_dataset=data,
                         processing_class=tokenizer)
    trl_model = trainer.model
    trl_model.train()
    trl_opt = torch.optim.AdamW(trl_model.parameters(), lr=LR)
    zoo_opt = torch.optim.AdamW(model.parameters(), lr=LR)
    settings = DPOSettings(loss_type="sigmoid", beta=BETA)
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731

    for step in range(STEPS):
        rows = [i % len(ROWS) for i in range(step * BATCH, (step + 1) * BATCH)]
        trl_batch = trainer.data_collator([trainer.train_dataset[i] for i in rows])
        batch = collate_pairs([encode_pair(parsed[i], encode, tokenizer.eos_token_id) for i in rows],
                              pad_id=tokenizer.pad_token_id)
        for key in ("input_ids", "attention_mask", "completion_mask"):
            assert torch.equal(batch[key], trl_batch[key]), (step, key)

        trl_loss = trainer.compute_loss(trl_model, trl_batch)
        trl_loss.backward()
        trl_opt.step()
        trl_opt.zero_grad()
        trl_metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}

        pairs = pair_logps(model, reference, batch)
        loss = dpo_loss(pairs, settings)
        loss.backward()
        zoo_opt.step()
        zoo_opt.zero_grad()

        assert float(loss) == pytest.approx(float(trl_loss), abs=1e-4), step
        for name, value in reward_metrics(pairs, BETA).items():
            assert float(value) == pytest.approx(trl_metrics[name], abs=1e-4), (step, name)
    assert float(loss) < 0.69  # the steps moved the policy away from the reference (ln 2 at step 0)
