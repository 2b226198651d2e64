"""LoRA against a hand-written reference: y = x W^T + b + (alpha / r) x A^T B^T; identity at initialisation,
only the adapters train, merging keeps the function, and the gpt2 preset's trainable share at rank 8."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.finetune import apply_finetune, lora_target_names, merge_lora, trainable_counts
from zoo.finetune.lora import LoRALinear


def tiny(**kw):
    torch.manual_seed(0)
    return zoo.build("gpt_nano", **kw)


def test_lora_linear_matches_the_formula():
    torch.manual_seed(0)
    base = torch.nn.Linear(6, 5)
    layer = LoRALinear(base, rank=2, alpha=3.0, dropout=0.0)
    torch.nn.init.normal_(layer.lora_B)
    x = torch.randn(4, 6)
    expected = x @ base.weight.T + base.bias + (3.0 / 2) * (x @ layer.lora_A.T @ layer.lora_B.T)
    torch.testing.assert_close(layer(x), expected)


def test_adapted_model_equals_the_base_model_at_initialisation():
    model = tiny()
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    before = model(ids).logits
    apply_finetune(model, {"name": "lora", "rank": 4, "targets": ["self_attn.qkv", "self_attn.o", "ffn.up"]})
    assert torch.equal(model(ids).logits, before)


def test_only_adapters_train_and_merged_logits_agree():
    model = tiny()
    apply_finetune(model, {"name": "lora", "rank": 4, "alpha": 8.0, "targets": ["qkv", "ffn.down"]})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(0, model.config.vocab_size, (4, 12))
    for _ in range(3):
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
    changed = sorted(k for k, v in model.state_dict().items() if not torch.equal(v, before[k]))
    assert changed and all(k.endswith(("lora_A", "lora_B")) for k in changed)
    assert {k.rsplit(".", 1)[0] for k in changed} == {f"decoder_stack.layers.{i}.{m}" for i in range(2)
                                                     for m in ("self_attn.qkv", "ffn.down")}
    model.eval()
    unmerged = model(ids).logits
    merge_lora(model)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    torch.testing.assert_close(model(ids).logits, unmerged, atol=1e-5, rtol=0)
    assert set(model.state_dict()) == set(zoo.build("gpt_nano").state_dict())


def test_gpt2_rank_8_trains_under_one_percent():
    with torch.device("meta"):
        model = zoo.build("gpt2")
    total = trainable_counts(model)[1]
    apply_finetune(model, {"name": "lora", "rank": 8})  # default targets: self_attn.qkv, self_attn.o
    trainable, with_adapters = trainable_counts(model)
    per_layer = 8 * (768 + 3 * 768) + 8 * (768 + 768)  # r (in + out) for qkv and o
    assert trainable == 12 * per_layer and with_adapters == total + trainable
    assert trainable / with_adapters < 0.01


def test_unknown_target_lists_the_names():
    model = tiny()
    with pytest.raises(ValueError,
                       match=r"finetune.targets: Unknown LoRA target module 'self_attn.qvk'. Did you "
                             r"mean 'self_attn.qkv'\?") as err:
        apply_finetune(model, {"name": "lora", "targets": ["self_attn.qvk"]})
    assert all(name in str(err.value) for name in lora_target_names(model))


def test_tied_head_is_refused():
    with pytest.raises(ValueError, match="tied to the token embeddings"):
        apply_finetune(tiny(), {"name": "lora", "targets": ["head.proj"]})


def test_freeze_embeddings_and_first_layer():
    model = tiny()
    apply_finetune(model, {"name": "freeze", "modules": ["embed"], "first_layers": 1})
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {n for n, _ in model.named_parameters()
                      if n.startswith(("embed.", "decoder_stack.layers.0."))}
    with pytest.raises(ValueError, match=r"Unknown module 'embeddings'. Did you mean 'embed'\?"):
        apply_finetune(tiny(), {"name": "freeze", "modules": ["embeddings"]})
    with pytest.raises(ValueError,
                       match="finetune.first_layers=3 but a stack of this model has only 2 layers"):
        apply_finetune(tiny(), {"name": "freeze", "first_layers": 3})


def test_lora_checkpoint_loads_merged(tmp_path):
    """zoo.load rebuilds the adapters a checkpoint records, loads them and merges (export has no adapters)."""
    from zoo.checkpoint import zoo_section
    from zoo.loader import load
    from zoo.modules.lora import lora_record
    from zoo.tokenizers.trained import train_char

    model = tiny()
    apply_finetune(model, {"name": "lora", "rank": 2, "targets": ["qkv"]})
    for m in model.modules():
        if isinstance(m, LoRALinear):
            torch.nn.init.normal_(m.lora_B)
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    expected = model.eval()(ids).logits
    section = {**zoo_section(model.config, "lm", train_char(["abcdef"])), "lora": lora_record(model)}
    ckpt = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "zoo": section}
    torch.save(ckpt, tmp_path / "x.ckpt")
    loaded, _ = load(tmp_path / "x.ckpt")
    torch.testing.assert_close(loaded(ids).logits, expected, atol=1e-5, rtol=0)
    assert not any(isinstance(m, LoRALinear) for m in loaded.modules())
