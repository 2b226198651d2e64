"""Bad configs and inputs fail early with one clear ValueError naming the key, value and what is allowed."""

import pytest
import torch

import zoo


@pytest.mark.parametrize(
    ("spec", "overrides", "message"),
    [
        ("gpt_smal", {}, r"Unknown model preset 'gpt_smal'. Did you mean 'gpt_small'\?.*Allowed: bert_small"),
        ("gpt_nano", {"n_head": 2}, r"Unknown model config key 'n_head'. Did you mean 'n_heads'\?"),
        ("gpt_nano", {"norm": "batchnorm"}, r"model.norm: .*'batchnorm'.*Allowed: layernorm, none, rmsnorm"),
        ("gpt_nano", {"positional": "rotary"}, r"model.positional: .*Allowed: alibi, learned, none, rope, sinusoidal"),
        ("gpt_nano", {"activation": "swish"}, r"model.activation: .*Allowed:"),
        ("gpt_nano", {"arch": "decoder_only"}, r"model.arch: .*Allowed: decoder, encoder, encoder_decoder"),
        ("gpt_nano", {"norm_placement": "middle"}, r"model.norm_placement: .*Allowed: post, pre"),
        ("gpt_nano", {"d_model": 30, "n_heads": 4}, r"d_model=30 is not divisible by model.n_heads=4"),
        ("gpt_nano", {"n_heads": 4, "n_kv_heads": 3}, r"n_heads=4 is not divisible by model.n_kv_heads=3"),
        ("gpt_nano", {"d_model": 24, "n_heads": 8, "positional": "rope"}, r"rope.*even head_dim.*3"),
        ("gpt_nano", {"dropout": 1.5}, r"model.dropout must be in \[0, 1\)"),
        ("gpt_nano", {"pad_id": 9999}, r"model.pad_id=9999 is outside the vocabulary"),
        ("gpt_nano", {"head": "classifier", "num_labels": 2}, r"needs model.arch='encoder'"),
    ],
)
def test_bad_config(spec, overrides, message):
    with pytest.raises(ValueError, match=message):
        zoo.build(spec, **overrides)


def test_token_ids_outside_vocabulary():
    model = zoo.build("gpt_nano")
    with pytest.raises(ValueError, match=r"token ids in \[0, 512\] but the vocabulary is \[0, 512\)"):
        model(torch.tensor([[0, 512]]))
    with pytest.raises(ValueError, match=r"token ids in \[-1, 3\]"):
        model(torch.tensor([[-1, 3]]))


def test_sequence_longer_than_learned_positions():
    model = zoo.build("gpt_nano")  # max_seq_len 64
    with pytest.raises(ValueError, match=r"reaches position 65 but learned positions stop at model.max_seq_len=64"):
        model(torch.zeros(1, 65, dtype=torch.long))
    zoo.build("gpt_nano", positional="rope")(torch.zeros(1, 65, dtype=torch.long))  # rope has no such limit


def test_wrong_input_types():
    model = zoo.build("gpt_nano")
    with pytest.raises(ValueError, match="integer tensor of shape"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(1, 0, dtype=torch.long))
