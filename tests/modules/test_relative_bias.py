"""T5's bucketed relative position bias against Hugging Face's T5Attention (built locally from a config):
the bucket function and the per-head bias, for the bidirectional encoder and the causal decoder."""

import pytest
import torch

import zoo
from zoo.config import ModelConfig
from zoo.modules.relative_bias import T5RelativeBias, relative_buckets

transformers = pytest.importorskip("transformers")
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402


@pytest.mark.parametrize(("n_buckets", "max_distance"), [(32, 128), (8, 20), (16, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_buckets_match_t5(causal, n_buckets, max_distance):
    distance = torch.arange(-300, 301)[None, :]  # key - query
    ours = relative_buckets(distance, causal=causal, n_buckets=n_buckets, max_distance=max_distance)
    theirs = T5Attention._relative_position_bucket(distance, bidirectional=not causal, num_buckets=n_buckets,
                                                   max_distance=max_distance)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("causal", [False, True])
def test_bias_matches_t5_attention(causal):
    hf_config = transformers.T5Config(d_model=16, d_kv=4, num_heads=4, relative_attention_num_buckets=8,
                                      relative_attention_max_distance=20, is_decoder=causal)
    theirs = T5Attention(hf_config, has_relative_attention_bias=True)
    ours = T5RelativeBias(ModelConfig(d_model=16, n_heads=4, positional={"name": "t5_relative", "buckets": 8,
                                                                     "max_distance": 20}))
    torch.nn.init.normal_(ours.relative_bias.weight)
    theirs.relative_attention_bias.weight.data.copy_(ours.relative_bias.weight)
    for q_start, q_len, k_len in [(0, 30, 30), (29, 1, 30), (10, 5, 15)]:  # full, one cached step, a chunk
        with torch.no_grad():
            ref = theirs.compute_bias(k_len, k_len)[:, :, q_start: q_start + q_len]  # (1, H, Tq, Tk)
            got = ours.terms(torch.zeros(1, q_len, dtype=torch.long), q_start, k_len, causal=causal).bias
        torch.testing.assert_close(got, ref)


def test_encoder_and_decoder_keep_separate_tables():
    model = zoo.build(dict(arch="encoder_decoder", d_model=16, n_heads=2, n_layers=1,
                           positional="t5_relative"))
    names = [n for n, _ in model.named_parameters() if "relative_bias" in n]
    assert names == ["src_embed.positional.relative_bias.weight", "tgt_embed.positional.relative_bias.weight"]


@pytest.mark.parametrize(("key", "value", "message"), [
    ("buckets", 7, "model.positional.buckets must be an even integer >= 4"),
    ("max_distance", 4, "model.positional.max_distance must be an integer > buckets / 2 = 16"),
])
def test_bad_bucket_config(key, value, message):
    with pytest.raises(ValueError, match=message):
        zoo.build(dict(arch="decoder", d_model=16, n_heads=2, positional={"name": "t5_relative", key: value}))
