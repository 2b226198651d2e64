"""Every preset and a randomized sample of knob combinations train a step on CPU; registry behaviour."""

import random

import pytest
import torch

import zoo
from zoo.config import ModelConfig
from zoo.modules.positional import POSITIONALS
from zoo.modules.residual import WIRINGS

from .tiny import tiny


def _step(model):
    c = model.config
    ids = torch.randint(5, c.vocab_size, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    if c.arch == "encoder_decoder":
        out = model(ids, attention_mask=mask, labels=torch.randint(5, c.vocab_size, (2, 7)))
    elif c.head.name == "classifier":
        out = model(ids, attention_mask=mask, labels=torch.tensor([0, 1]))
    else:
        out = model(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), name
    return out


@pytest.mark.parametrize("name", zoo.list_models())
def test_every_preset_trains_a_step(name):
    _step(tiny(name).train())


def _random_config(rng: random.Random) -> dict:
    n_heads = rng.choice([1, 2, 4])
    scheme = rng.choice(POSITIONALS.names())
    drawn = dict(
        arch=rng.choice(["encoder", "decoder", "encoder_decoder"]), vocab_size=53, d_model=16,
        n_layers=rng.choice([1, 2]), n_heads=n_heads, n_kv_heads=rng.choice([None, 1, n_heads]),
        ffn=rng.choice(["mlp", "mlp", "none"]), ffn_ratio=rng.choice([1.0, 2.0, 4.0]),
        activation=rng.choice(["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]),
        norm=rng.choice(["layernorm", "rmsnorm", "none"]), norm_placement=rng.choice(WIRINGS.names()),
        residual=rng.choice([True, True, False]),
        layouts={"sinusoidal": rng.choice(["interleaved", "half"]),
                 "rope": rng.choice(["half", "interleaved"])},
        max_seq_len=16, dropout=rng.choice([0.0, 0.1]),
        bias=rng.choice([True, False]), tie_embeddings=rng.choice([True, False]),
        share_embeddings=rng.choice([True, False]), embed_scale=rng.choice([True, False]),
        embed_norm=rng.choice([True, False]),
    )
    layout = drawn.pop("layouts").get(scheme)  # drawn for every scheme, so each seed keeps its old config
    drawn["positional"] = {"name": scheme, "layout": layout} if layout else scheme
    return drawn


@pytest.mark.parametrize("seed", range(24))
def test_random_knob_combinations_train_a_step(seed):
    _step(zoo.build(_random_config(random.Random(seed))).train())


def test_list_models_filters_by_glob():
    assert zoo.list_models("gpt*") == ["gpt2", "gpt_mini", "gpt_nano", "gpt_oss_120b", "gpt_oss_20b",
                                       "gpt_small"]
    for name in ["transformer_base", "transformer_tiny", "bert_small", "llama_small", "single_head_lm",
                 "bigram"]:
        assert name in zoo.list_models()


def test_register_model_and_duplicates():
    @zoo.register_model("test_only_net")
    def _net():
        return ModelConfig(arch="decoder", d_model=16, n_heads=2, vocab_size=40)

    assert "test_only_net" in zoo.list_models()
    assert zoo.build("test_only_net", n_heads=4).config.n_heads == 4
    with pytest.raises(ValueError, match="already registered"):
        zoo.register_model("test_only_net")(_net)
    with pytest.raises(ValueError, match="already registered"):
        zoo.register_model("gpt_small")(_net)


def test_build_accepts_dict_dataclass_and_omegaconf():
    from omegaconf import OmegaConf

    spec = zoo.presets.preset_dict("gpt_nano")
    for form in (spec, ModelConfig(**spec), OmegaConf.create(spec)):
        assert zoo.build(form).config == ModelConfig(**spec)


def test_presets_match_their_documented_shapes():
    base = zoo.build("transformer_base").config
    assert (base.d_model, base.n_encoder_layers, base.n_decoder_layers, base.n_heads, base.ffn_dim) == (
        512, 6, 6, 8, 2048)
    assert (base.norm_placement, base.positional.name, base.activation, base.dropout) == (
        "post", "sinusoidal", "relu", 0.1)
    llama = zoo.build("llama_small").config
    assert (llama.norm, llama.positional.name, llama.activation, llama.bias) == ("rmsnorm", "rope", "swiglu",
                                                                                 False)
    assert llama.kv_heads < llama.n_heads
    assert 10e6 <= zoo.build("gpt_small").num_parameters() <= 20e6


def test_presets_compose_in_hydra_after_the_schema_import(fresh_interpreter):
    """A user's own Hydra app can use conf/model presets after `import zoo.hydra_schema`, which registers the
    schema (a plain `import zoo` imports no Hydra: tests/test_import.py); the app is the "hydra app" step of
    tests/fresh_interpreter.py."""
    # init_std is not in the YAML: the schema supplies it
    assert fresh_interpreter["hydra app"].printed == ["4", "0.05", "0.0"]
