"""`model.mixer=gated_deltanet` as the whole stack's mixer: a decoder trains and generates, a left-padded
batch decodes as each row alone, tracing and parameter counts take it, and every bad combination is one error
naming the key before anything is built."""

import pytest
import torch

import zoo
from zoo.inspection.counts import parameter_counts
from zoo.inspection.trace import trace
from zoo.modules.gated_deltanet import GatedDeltaNet

GDN = {"name": "gated_deltanet", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
       "linear_key_head_dim": 8, "linear_value_head_dim": 6, "chunk_size": 4}
TINY = {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 48, "max_seq_len": 64,
        "positional": "none", "norm": "rmsnorm"}


def _model(preset: str = "gpt_nano", mixer=None, **keys) -> torch.nn.Module:
    torch.manual_seed(0)
    return zoo.build(preset, **{**TINY, "mixer": {**GDN, **(mixer or {})}, **keys})


def test_decoder_trains():
    model = _model()
    assert all(isinstance(layer.self_attn, GatedDeltaNet) for layer in model.decoder_stack.layers)
    ids = torch.randint(3, 64, (4, 12))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no_cache"])
def test_greedy_generation_is_the_argmax_of_full_forwards(use_cache):
    """With the cache (the recurrent state carried, tests/generation/test_recurrent_cache.py) or without."""
    model = _model(init_std=0.2, tie_embeddings=False).eval()
    prompt = torch.randint(3, 64, (2, 5))
    out = model.generate(prompt, max_new_tokens=4, do_sample=False, use_cache=use_cache)
    ids = prompt
    for _ in range(4):  # greedy by hand: the argmax of a full forward, token after token
        ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ids)


def test_a_left_padded_batch_decodes_as_each_row_alone():
    model = _model().eval()
    long, short = torch.randint(3, 64, (1, 7)), torch.randint(3, 64, (1, 4))
    batch = torch.cat([long, torch.cat([torch.zeros(1, 3, dtype=torch.long), short], dim=1)])
    mask = torch.ones_like(batch)
    mask[1, :3] = 0
    out = model.generate(batch, attention_mask=mask, max_new_tokens=5, do_sample=False, use_cache=False)
    alone = [model.generate(row, max_new_tokens=5, do_sample=False, use_cache=False) for row in (long, short)]
    assert torch.equal(out[0, 7:], alone[0][0, 7:]) and torch.equal(out[1, 7:], alone[1][0, 4:])


def test_tracing_and_parameter_counts_take_it():
    model = _model()
    recorded = trace(model, torch.randint(3, 64, (1, 6)))
    assert recorded.get("attn_output", layer=1).shape == (1, 6, 32)
    counts = parameter_counts(model)
    mixer = sum(p.numel() for layer in model.decoder_stack.layers for p in layer.self_attn.parameters())
    assert counts["attention"] == mixer and counts.get("other", 0) == 0


def test_packed_documents_are_refused_naming_the_mixer():
    model = _model()
    ids = torch.randint(3, 64, (1, 6))
    with pytest.raises(ValueError, match="model.mixer=gated_deltanet carries one state along each row"):
        model(ids, document_ids=torch.tensor([[0, 0, 0, 1, 1, 1]]))


def test_tensor_parallel_is_refused_naming_the_mixer():
    from zoo.training.tensor_parallel import check_tensor_parallel

    with pytest.raises(ValueError, match="cannot split model.mixer: gated_deltanet: its q/k/v convolution"):
        check_tensor_parallel(_model().config, 2, 2)


@pytest.mark.parametrize("keys, message", [
    ({"mixer": {"linear_num_key_heads": 3}},
     "model.mixer.linear_num_value_heads=4 is not divisible by model.mixer.linear_num_key_heads=3"),
    ({"positional": "rope"}, "model.positional=rope acts inside attention"),
    ({"positional": "alibi"}, "model.positional=alibi acts inside attention"),
    ({"n_kv_heads": 2}, "model.n_kv_heads=2 is attention's; model.mixer=gated_deltanet"),
    ({"head_dim": 16}, "model.head_dim=16 is attention's; model.mixer=gated_deltanet"),
    ({"mixer": {"linear_conv_kernel_dim": 0}}, "model.mixer.linear_conv_kernel_dim must be an integer >= 1"),
    ({"mixer": {"sliding_window": 4}}, "model.mixer=gated_deltanet has no key 'sliding_window'"),
    ({"layer_pattern": ["local", "global"]}, "tags layers 'local', which needs model.mixer.sliding_window"),
])
def test_bad_combinations_are_one_error_naming_the_key(keys, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        _model(mixer=keys.pop("mixer", None), **keys)


@pytest.mark.parametrize("preset, arch", [("bert_small", "encoder"), ("transformer_tiny", "encoder_decoder")])
def test_an_architecture_with_a_bidirectional_stack_is_refused(preset, arch):
    with pytest.raises(ValueError, match=f"model.mixer=gated_deltanet reads the tokens left to right only, "
                                         f"and arch='{arch}' has a bidirectional"):
        _model(preset)


@pytest.mark.parametrize("mixer, named", [(None, "model.mixer='gated_deltanet' (would load as 'attention')"),
                                          ({"name": "attention", "output_gate": True},
                                           "model.mixer.output_gate=True (would load as False)")])
def test_export_to_a_transformers_family_names_what_it_cannot_express(tmp_path, mixer, named):
    """No family zoo converts carries these yet: the round trip names the key; nothing is written."""
    model = _model(mixer=mixer) if mixer is None else zoo.build("gpt_nano", **{**TINY, "mixer": mixer})
    with pytest.raises(ValueError, match=r"No Hugging Face family can represent this zoo model") as err:
        zoo.save_pretrained(model, tmp_path / "out")
    assert named in str(err.value)
    assert not (tmp_path / "out").exists()
