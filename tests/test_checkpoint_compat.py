"""Checkpoints written before a knob existed still load and resume: a model_config of the flat layout (before
each part owned its keys, issue 35) without the keys added since (head_activation, rel_buckets,
rel_max_distance) means those knobs' defaults."""

from __future__ import annotations

import torch

import zoo
from zoo.checkpoint import Checkpoint, atomic_torch_save, check_compatible, zoo_section
from zoo.data import TOKENIZERS

ADDED_SINCE = ("head_activation", "rel_buckets", "rel_max_distance")
# the flat keys a decoder with learned positions saved before issue 35 (tests/fixtures/b777160/lm's config),
# defaults throughout; each part's keys now live under model.positional / model.mixer / model.layer_pattern
OLD_FLAT = {"qkv_bias": None, "qk_norm": False, "attn_scale": None, "attn_softcap": None,
            "sliding_window": None, "global_every": 0, "positional": "learned", "pos_offset": 0,
            "pos_skip_pads": False, "sinusoidal_layout": "interleaved", "rope_base": 10000.0,
            "rope_layout": "half", "rope_fraction": 1.0, "rope_scaling": "none", "rope_factor": 1.0,
            "rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0, "rope_original_max_len": None,
            "rel_buckets": 32, "rel_max_distance": 128}
PARTS = ("positional", "mixer", "layer_pattern")


def test_checkpoint_without_newer_keys_loads_and_resumes(tmp_path):
    tok = TOKENIZERS["char"](["the cat sat", "a dog ran"])
    model = zoo.build(dict(arch="decoder", vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2,
                           max_seq_len=16))
    section = zoo_section(model.config, "lm", tok)
    spine = {k: v for k, v in section["model_config"].items() if k not in PARTS}
    section["model_config"] = {k: v for k, v in {**spine, **OLD_FLAT}.items() if k not in ADDED_SINCE}
    path = tmp_path / "old.ckpt"
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": section}, path)
    loaded, _ = zoo.load(path)
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(loaded(ids).logits, model.eval()(ids).logits)
    record = Checkpoint.read(path).record
    check_compatible(record, model.config, "lm", path, tok)  # raises if any key "differs"


def test_record_reads_an_old_section_and_writes_back_what_it_read():
    """The zoo section is read by CheckpointRecord.from_dict alone: a key an older checkpoint lacks (what
    trains, the HF family, the W&B run, even the RNG states) reads as None, and to_dict writes back the same
    section (a field left None is not written)."""
    from zoo.checkpoint import CheckpointRecord

    old = {"format_version": 1, "model_config": {"arch": "decoder"}, "task": "lm", "tokenizer_files": {}}
    record = CheckpointRecord.from_dict(old)
    assert (record.frozen, record.lora, record.hf_model_type, record.wandb_run_id, record.rng) == (None,) * 5
    assert record.to_dict() == old
    full = {**old, "rng": {"torch": torch.zeros(1)}, "frozen": ["embed"], "lora": {"rank": 2},
            "hf_model_type": "gpt2", "wandb_run_id": "abc"}
    assert list(CheckpointRecord.from_dict(full).to_dict()) == list(full)  # same keys, same order


def test_a_part_that_differs_from_the_checkpoints_is_named(tmp_path):
    """A resume compares the parts too (the flat layout's 'unread' filter had let every part through): a
    RoPE base, an attention window, a MoE router or a head's pooling that differ from the checkpoint's are
    named, each by its key."""
    import pytest

    from zoo.checkpoint import CheckpointError

    tok = TOKENIZERS["char"](["the cat sat", "a dog ran"])
    base = dict(arch="decoder", vocab_size=tok.vocab_size, d_model=16, n_layers=2, n_heads=2, max_seq_len=16,
                positional="rope", ffn={"name": "moe", "n_experts": 2, "top_k": 1})
    model = zoo.build(base)
    path = tmp_path / "run.ckpt"
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": zoo_section(model.config, "lm", tok)}, path)
    record = Checkpoint.read(path).record
    for change, key in ((dict(positional={"name": "rope", "base": 500.0}), "model.positional"),
                        (dict(mixer={"sliding_window": 4}), "model.mixer"),
                        (dict(ffn={**base["ffn"], "router": "softmax_topk"}), "model.ffn")):
        other = zoo.presets.resolve_config({**base, **change})
        with pytest.raises(CheckpointError, match=f"{key}: checkpoint"):
            check_compatible(record, other, "lm", path, tok)
