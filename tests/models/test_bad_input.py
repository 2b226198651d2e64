"""Bad configs and inputs fail early with one clear ValueError naming the key, value and what is allowed."""

import pytest
import torch

import zoo


@pytest.mark.parametrize(
    ("spec", "overrides", "message"),
    [
        ("gpt_smal", {},
         r"Unknown model preset 'gpt_smal'. Did you mean 'gpt_small'\?.*Allowed: attention_lm, bert_small"),
        ("gpt_nano", {"n_head": 2}, r"Unknown model config key 'n_head'. Did you mean 'n_heads'\?"),
        ("gpt_nano", {"norm": "batchnorm"}, r"model.norm: .*'batchnorm'.*Allowed: layernorm, none, rmsnorm"),
        ("gpt_nano", {"positional": "rotary"},
         r"model.positional: .*Allowed: alibi, learned, none, rope, sinusoidal"),
        ("gpt_nano", {"activation": "swish"}, r"model.activation: .*Allowed:"),
        ("gpt_nano", {"arch": "decoder_only"}, r"model.arch: .*Allowed: decoder, encoder, encoder_decoder"),
        ("gpt_nano", {"norm_placement": "middle"},
         r"model.norm_placement: .*Allowed: parallel, parallel_shared, post, post_sublayer, pre, sandwich"),
        ("gpt_nano", {"d_model": 30, "n_heads": 4}, r"d_model=30 is not divisible by model.n_heads=4"),
        ("gpt_nano", {"n_heads": 4, "n_kv_heads": 3}, r"n_heads=4 is not divisible by model.n_kv_heads=3"),
        ("gpt_nano", {"d_model": 24, "n_heads": 8, "positional": "rope"},
         r"rope.*= 3 features per head; that must be even"),
        ("gpt_nano", {"dropout": 1.5}, r"model.dropout must be in \[0, 1\)"),
        ("gpt_nano", {"n_layers": 10**40}, r"model.n_layers must be <= 4096"),  # built for hours before
        # a size past torch's int64 failed inside torch with a TypeError or OverflowError
        ("gpt_nano", {"d_ff": 10**400}, r"model.d_ff must be null or an integer <= 2147483647"),
        ("gpt_nano", {"vocab_size": 2**63}, r"model.vocab_size must be <= 2,147,483,647 \(2\*\*31 - 1\)"),
        ("transformer_tiny", {"decoder_layers": 2**63}, r"model.decoder_layers must be <= 4096"),
        ("gpt_nano", {"pad_id": 9999}, r"model.pad_id=9999 is outside the vocabulary"),
        ("transformer_tiny", {"head": {"name": "classifier", "num_labels": 2}},
         r"model.head='classifier' is not available on arch "
         r"'encoder_decoder', which carries model.head=lm \| none"),
        ("gpt_nano", {"head": "classifer"},
         r"model.head: Unknown head 'classifer'. Did you mean 'classifier'\?"),
        ("bert_small", {"head": "token_classifier"},
         r"model.head=token_classifier needs model.head.num_labels >= 1"),
        ("bert_small", {"head": {"name": "classifier", "num_labels": 2, "pool": "max"}},
         r"model.head.pool: Unknown pooling 'max'.*Allowed: first, last, mean"),
        ("bert_small", {"head": {"name": "classifier", "num_labels": 2, "dense": True,
                                 "activation": "geglu"}},
         r"model.head.activation='geglu' is gated; the head transform takes an ungated one"),
        ("gpt_nano", {"head": {"name": "lm", "activation": "relu"}},  # built, and relu applied nowhere
         r"model.head.activation='relu' is the activation of the head's transform, which is off: "
         r"set model.head.transform=true"),
        ("bert_small", {"head": {"name": "classifier", "num_labels": 2, "activation": "tanh"}},
         r"model.head.activation='tanh' .* set model.head.dense=true"),
        ("gpt_nano", {"head": {"name": "classifier", "num_labels": 2, "pooler": "swiglu"}},
         r"model.head.pooler: Unknown pooler 'swiglu'.*Allowed: .*none.*tanh"),
        ("gpt_nano", {"head": {"name": "none", "pool": "first"}},
         r"model.head=none has no pooler; set model.head.pooler"),
        ("bert_small", {"head": {"name": "classifier", "num_labels": -1}},
         r"model.head.num_labels must be an integer >= 0, got -1"),
        ("bert_small", {"head": 3},
         r"model.head must be a name \(classifier, lm, none, qa, token_classifier\) or a mapping"),
        # a key only another head reads (choosing another head replaces the keys: test_head_keys.py)
        ("gpt_nano", {"head": {"num_labels": 2}},
         r"model.head=lm has no key 'num_labels'. model.head.num_labels is read by "
         r"head=classifier\|token_classifier: choose it with model.head=classifier"),
        ("bert_small", {"head": {"name": "classifier", "num_labels": 2, "bias": True}},
         r"model.head=classifier has no key 'bias'. model.head.bias is read by head=lm"),
        # the flat keys of before issue 35 name their new place
        ("gpt_nano", {"num_labels": 2}, r"model.num_labels is now model.head.num_labels"),
        ("gpt_nano", {"final_softcap": 2.0}, r"model.final_softcap is now model.head.softcap"),
        ("gpt_nano", {"encoder_layers": 3}, r"model.encoder_layers=3 applies to arch 'encoder_decoder' only"),
        ("gpt_nano", {"positional": {"name": "rope", "base": 0}},
         r"model.positional.base must be a finite number > 0, got 0"),  # was NaN gradients
        ("gpt_nano", {"init_std": -0.02}, r"model.init_std must be >= 0"),
        ("gpt_nano", {"bias": "no"}, r"model.bias must be true or false, got 'no'"),  # was silently True
        ("gpt_nano", {"final_norm": 1}, r"model.final_norm must be true or false"),
        ("gpt_nano", {"norm_eps": "1e-5"}, r"model.norm_eps must be a finite number, got '1e-5'"),
        ("gpt_nano", {"dropout": float("nan")}, r"model.dropout must be a finite number"),
        ("transformer_tiny", {"encoder_layers": 0, "decoder_layers": 0},
         r"needs at least one encoder or decoder"),
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
    with pytest.raises(ValueError,
                       match=r"reaches position 65 but learned positions stop at model.max_seq_len=64"):
        model(torch.zeros(1, 65, dtype=torch.long))
    zoo.build("gpt_nano", positional="rope")(torch.zeros(1, 65, dtype=torch.long))  # rope has no such limit


def test_wrong_input_types():
    model = zoo.build("gpt_nano")
    with pytest.raises(ValueError, match="integer tensor of shape"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(1, 0, dtype=torch.long))


def test_explicit_positions_outside_the_learned_table():
    model = zoo.build("gpt_nano", max_seq_len=16)
    ids = torch.tensor([[1, 2]])
    for pos in ([[15, 16]], [[-1, 0]]):
        with pytest.raises(ValueError,
                           match=r"position_ids hold positions in .* learned positions cover \[0, 16\)"):
            model(ids, position_ids=torch.tensor(pos))
    zoo.build("gpt_nano", positional="rope", max_seq_len=16)(ids, position_ids=torch.tensor([[40, 41]]))


def test_attention_mask_of_the_wrong_shape():
    model = zoo.build("gpt_nano")
    ids = torch.tensor([[1, 2], [3, 4]])
    for mask in (torch.ones(2, 5), torch.ones(3, 2), torch.tensor([[0, 1, 1], [1, 1, 1]])):  # all-ones too
        with pytest.raises(ValueError, match=r"attention_mask has shape .* must be \(2, 2\)"):
            model(ids, attention_mask=mask)
    seq2seq = zoo.build("transformer_tiny")
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 3\) but must be \(2, 4\)"):
        seq2seq(torch.ones(2, 4, dtype=torch.long), ids, attention_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"decoder_attention_mask has shape \(2, 3\) but must be \(2, 2\)"):
        seq2seq(torch.ones(2, 4, dtype=torch.long), ids, decoder_attention_mask=torch.ones(2, 3))


def test_token_types_and_labels_outside_their_range():
    bert = zoo.build("bert_small", type_vocab_size=2, vocab_size=500)
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError,
                       match=r"token_type_ids hold types in \[0, 2\] but model.type_vocab_size=2"):
        bert(ids, token_type_ids=torch.tensor([[0, 1, 2]]))
    with pytest.raises(ValueError,
                       match=r"labels hold values in \[3, 500\]; allowed are \[0, 500\) and -100"):
        bert(ids, labels=torch.tensor([[-100, 3, 500]]))
    classifier = zoo.build("bert_small", head={"name": "classifier", "num_labels": 2}, vocab_size=500)
    with pytest.raises(ValueError, match=r"labels hold values in \[2, 2\]; allowed are \[0, 2\)"):
        classifier(ids, labels=torch.tensor([2]))
    with pytest.raises(ValueError, match=r"labels must be an integer tensor of shape \(1,\)"):
        classifier(ids, labels=torch.tensor([[0, 1]]))
    gpt = zoo.build("gpt_nano")
    with pytest.raises(ValueError, match=r"labels must be an integer tensor of shape \(1, 3\)"):
        gpt(ids, labels=torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match=r"labels hold values in \[-5, 2\]"):
        gpt(ids, labels=torch.tensor([[1, 2, -5]]))
    with pytest.raises(ValueError, match=r"labels hold values in \[512, 512\]"):
        zoo.build("transformer_tiny", vocab_size=512)(ids, labels=torch.tensor([[512]]))


def test_encoder_has_no_cache():
    with pytest.raises(ValueError, match="arch='encoder' has no decoder"):
        zoo.build("bert_small").new_cache()
