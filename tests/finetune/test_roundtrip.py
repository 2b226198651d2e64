"""End to end, nothing downloaded: a tiny Hugging Face model folder built with transformers + tokenizers ->
`train.py init_from=<folder>` for a few dozen steps -> format=hf export -> transformers loads model and
tokenizer, its logits equal zoo's and its tokenizer gives zoo's ids; the loss on held-out text went down."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.training.run import train

from .conftest import FAST
from .folders import CORPUS

pytestmark = pytest.mark.e2e  # trains, spawns processes or drives a browser: outside the inner loop

transformers = pytest.importorskip("transformers")
TEXT = "def add(a, b):\n    return a + b\nclass Point:\n    def __init__(self, x, y):\n"


def finetune(make_run_cfg, folder, corpus, *extra: str, run: str = "run", steps: int = 20):
    return train(make_run_cfg([f"init_from={folder}", "data=text", f"data.files={corpus}", *FAST,
                               f"trainer.max_steps={steps}", f"eval_every={steps}", "optim.lr=3e-3",
                               "scheduler.warmup_steps=2", *extra], run=run))


def lm_loss(model, ids: torch.Tensor) -> float:
    with torch.no_grad():
        return float(model(ids, labels=ids).loss)


def test_gpt2_round_trip(make_run_cfg, folders, tmp_path):
    result = finetune(make_run_cfg, folders["gpt2"], folders["corpus"])
    out = zoo.export(result.last_checkpoint, tmp_path / "hf", format="hf")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    model, tok = zoo.load(result.last_checkpoint)

    original_tok = transformers.AutoTokenizer.from_pretrained(folders["gpt2"])
    ids = tok.encode(TEXT)
    assert hf_tok(TEXT, add_special_tokens=False).input_ids == ids == original_tok(TEXT).input_ids
    batch = torch.tensor([ids])
    with torch.no_grad():
        torch.testing.assert_close(model(batch).logits, hf_model(batch).logits, atol=1e-4, rtol=0)

    held_out = torch.tensor([original_tok("".join(CORPUS[:4])).input_ids[:64]])
    before = transformers.AutoModelForCausalLM.from_pretrained(folders["gpt2"]).eval()
    assert lm_loss(hf_model, held_out) < lm_loss(before, held_out) - 0.5


def test_bert_masked_lm_round_trip(make_run_cfg, folders, tmp_path):
    result = finetune(make_run_cfg, folders["bert"], folders["corpus"])
    out = zoo.export(result.last_checkpoint, tmp_path / "hf", format="hf")
    hf_model = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    model, tok = zoo.load(result.last_checkpoint)
    original_tok = transformers.AutoTokenizer.from_pretrained(folders["bert"])
    ids = tok.encode(TEXT)
    assert (hf_tok(TEXT, add_special_tokens=False).input_ids == ids
            == original_tok(TEXT, add_special_tokens=False).input_ids)
    framed = original_tok(TEXT).input_ids  # [CLS] x [SEP]
    assert hf_tok(TEXT).input_ids == framed
    batch = torch.tensor([framed])
    with torch.no_grad():
        torch.testing.assert_close(model(batch).logits, hf_model(batch).logits, atol=1e-4, rtol=0)
    before = transformers.AutoModelForMaskedLM.from_pretrained(folders["bert"]).eval()
    masked, labels = batch.clone(), torch.full_like(batch, -100)
    every = torch.arange(1, batch.shape[1] - 1, 4)
    labels[0, every], masked[0, every] = batch[0, every], original_tok.mask_token_id
    with torch.no_grad():
        after_loss, before_loss = (float(m(masked, labels=labels).loss) for m in (hf_model, before))
    assert after_loss < before_loss - 0.5


def test_bert_classification_gets_a_fresh_head(make_run_cfg, folders, tmp_path, capsys):
    result = train(make_run_cfg([f"init_from={folders['bert']}", "task=classification", "data=classification",
                                 f"data.path={folders['labels']}", *FAST, "trainer.limit_val_batches=1.0",
                                 "trainer.max_steps=30", "eval_every=30", "optim.lr=3e-3",
                                 "scheduler.warmup_steps=2"]))
    assert ("new (trained from scratch): head.pool.bias, "
            "head.pool.weight, head.proj.bias, head.proj.weight") in (
        capsys.readouterr().out)
    assert result.metrics["val/accuracy"] >= 0.9  # half the examples are "def" lines: chance is 0.5
    out = zoo.export(result.last_checkpoint, tmp_path / "hf", format="hf")
    hf_model = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    model, tok = zoo.load(result.last_checkpoint)
    assert hf_model.config.num_labels == model.config.head.num_labels == 2
    batch = torch.tensor([transformers.AutoTokenizer.from_pretrained(out)("def f(x):").input_ids])
    with torch.no_grad():
        torch.testing.assert_close(model(batch).logits, hf_model(batch).logits, atol=1e-4, rtol=0)
    pretrained = zoo.from_pretrained(folders["bert"])  # the encoder started from the pretrained weights
    moved = (model.embed.tokens.weight - pretrained.embed.tokens.weight).abs().max()
    assert 0 < moved < 0.5


def test_t5_seq2seq_round_trip(make_run_cfg, folders, tmp_path):
    result = train(make_run_cfg([f"init_from={folders['t5']}", "data=pairs", f"data.path={folders['pairs']}",
                                 *FAST, "trainer.max_steps=20", "eval_every=20", "optim.lr=3e-3",
                                 "scheduler.warmup_steps=2"]))
    out = zoo.export(result.last_checkpoint, tmp_path / "hf", format="hf")
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    model, tok = zoo.load(result.last_checkpoint)
    original_tok = transformers.AutoTokenizer.from_pretrained(folders["t5"])
    assert hf_tok(TEXT).input_ids == original_tok(TEXT).input_ids  # x </s>
    assert tok.encode(TEXT) == original_tok(TEXT, add_special_tokens=False).input_ids
    src = torch.tensor([original_tok("def add(a, b):").input_ids])
    tgt = torch.tensor([[0, *original_tok("def add").input_ids]])  # decoder_start = pad = 0
    with torch.no_grad():
        ours = model(src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(ours, hf_model(input_ids=src, decoder_input_ids=tgt).logits, atol=1e-4,
                                   rtol=0)
        labels = torch.tensor([original_tok("def add(a, b):").input_ids])
        before = transformers.AutoModelForSeq2SeqLM.from_pretrained(folders["t5"]).eval()
        after_loss, before_loss = (float(m(input_ids=src, labels=labels).loss) for m in (hf_model, before))
    assert after_loss < before_loss - 0.5


def test_gpt2_lora_trains_only_adapters_and_exports_merged(make_run_cfg, folders, tmp_path, capsys):
    result = finetune(make_run_cfg, folders["gpt2"], folders["corpus"], "finetune=lora", "finetune.rank=4",
                      "finetune.targets=[self_attn.qkv,ffn.up]", "optim.lr=1e-2", steps=10)
    out = capsys.readouterr().out
    assert "LoRA rank 4, alpha 16 on 4 layers (self_attn.qkv, ffn.up)" in out
    # 2 layers x r (in + out) for qkv (32 -> 96) and up (32 -> 128)
    adapters = 2 * 4 * ((32 + 96) + (32 + 128))
    assert f"trainable parameters: {adapters:,} of " in out

    from zoo.checkpoint import read_checkpoint

    ckpt = read_checkpoint(result.last_checkpoint)
    pretrained = zoo.from_pretrained(folders["gpt2"]).state_dict()
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    base = {k: v for k, v in state.items() if "lora_" not in k}
    assert set(base) == set(pretrained) and all(torch.equal(base[k], pretrained[k]) for k in base)
    assert all(state[k].abs().sum() > 0 for k in state if k.endswith("lora_B"))  # B starts at 0 and trained

    out_dir = zoo.export(result.last_checkpoint, tmp_path / "hf", format="hf")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out_dir).eval()
    model, tok = zoo.load(result.last_checkpoint)  # merged
    batch = torch.tensor([tok.encode(TEXT)])
    with torch.no_grad():
        torch.testing.assert_close(model(batch).logits, hf_model(batch).logits, atol=1e-4, rtol=0)
        moved = (hf_model(batch).logits - zoo.from_pretrained(folders["gpt2"])(batch).logits).abs().max()
    assert moved > 1e-3
