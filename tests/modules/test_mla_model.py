"""`model.mixer=mla` inside zoo's stacks: decoder and encoder-decoder, sliding windows from the layer pattern,
dropout, activation checkpointing, LoRA on its projections, tracing, the tensor-parallel refusal and the
config refusals (each one error naming the key, before anything is built)."""

import re

import pytest
import torch

import zoo
from zoo.inspection.trace import trace
from zoo.modules.attention import Attention
from zoo.modules.mla import LatentAttention

MLA = {"name": "mla", "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6}
TINY = {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 48, "max_seq_len": 64,
        "positional": {"name": "rope", "layout": "interleaved"}}


def _model(preset: str = "llama_small", mixer=None, **keys) -> torch.nn.Module:
    torch.manual_seed(0)
    extra = {"n_kv_heads": None} if preset == "llama_small" else {}
    return zoo.build(preset, **{**TINY, **extra, "mixer": {**MLA, **(mixer or {})}, **keys})


def test_decoder_trains_and_its_cached_greedy_equals_the_uncached():
    model = _model(mixer={"q_lora_rank": 10})
    assert all(isinstance(layer.self_attn, LatentAttention) for layer in model.decoder_stack.layers)
    ids = torch.randint(3, 64, (2, 9))
    loss = model(ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters() if p.requires_grad)
    model.eval()
    prompt = torch.randint(3, 64, (2, 5))
    cached = model.generate(prompt, max_new_tokens=8, do_sample=False)
    uncached = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)


def test_heads_that_do_not_divide_d_model_build_and_decode():
    """MLA's head sizes are its own keys (GLM-4.7-Flash: 20 heads over d_model 2048): 3 heads over 32 build,
    train and decode from the latent as the materialised cache does; attention still needs the division."""
    model = _model(n_heads=3, mixer={"q_lora_rank": 10})
    ids = torch.randint(3, 64, (2, 9))
    assert torch.isfinite(model(ids, labels=ids).loss)
    materialised = _model(n_heads=3, mixer={"q_lora_rank": 10, "cache": "materialised"}).eval()
    prompt = torch.randint(3, 64, (2, 5))
    assert torch.equal(model.eval().generate(prompt, max_new_tokens=6, do_sample=False),
                       materialised.generate(prompt, max_new_tokens=6, do_sample=False))
    with pytest.raises(ValueError, match=r"model.d_model=32 is not divisible by model.n_heads=3"):
        zoo.build("llama_small", **{**TINY, "n_kv_heads": None, "n_heads": 3})


def test_encoder_decoder_cross_attention_is_attention_over_the_memory():
    model = _model("transformer_tiny", norm="rmsnorm")
    for layer in model.decoder_stack.layers:
        assert isinstance(layer.self_attn, LatentAttention) and isinstance(layer.cross_attn, Attention)
        assert layer.cross_attn.cross and layer.cross_attn.head_dim == 32 // 4
    assert all(isinstance(layer.self_attn, LatentAttention) for layer in model.encoder_stack.layers)
    src, tgt = torch.randint(3, 64, (2, 7)), torch.randint(3, 64, (2, 5))
    out = model(src, decoder_input_ids=tgt, labels=tgt)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    model.eval()
    cached = model.generate(src, max_new_tokens=6, do_sample=False)
    assert torch.equal(cached, model.generate(src, max_new_tokens=6, do_sample=False, use_cache=False))


def test_a_local_layer_sees_only_its_window():
    """One local layer, window 3: position 5's output does not change when tokens 0..2 do."""
    model = _model(n_layers=1, mixer={"sliding_window": 3}, layer_pattern=["local"]).eval()
    ids = torch.randint(3, 64, (1, 8))
    changed = ids.clone()
    changed[0, :3] = (ids[0, :3] + 1) % 60 + 3
    a, b = model(ids).logits, model(changed).logits
    assert torch.allclose(a[0, 5:], b[0, 5:], atol=1e-6)
    assert not torch.allclose(a[0, 3], b[0, 3])  # position 3 sees tokens 1..3, token 2 among them


def test_dropout_in_training_only_and_the_weights_path_equals_sdpa():
    model = _model(attn_dropout=0.5)
    ids = torch.randint(3, 64, (2, 9))
    model.train()
    assert not torch.equal(model(ids).logits, model(ids).logits)
    model.eval()
    fast = model(ids).logits
    slow = model(ids, need_weights=True)
    assert torch.allclose(fast, slow.logits, atol=1e-5)
    assert slow.attentions[0].shape == (2, 4, 9, 9)


def test_activation_checkpointing_gives_the_same_gradients():
    ids = torch.randint(3, 64, (2, 9))
    grads = []
    for recompute in (False, True):
        model = _model(dropout=0.1)
        model.decoder_stack.checkpoint_layers = recompute
        torch.manual_seed(1)
        model(ids, labels=ids).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_lora_adapts_mla_projections_by_their_names():
    from zoo.finetune.lora import add_lora, lora_target_names

    model = _model(mixer={"q_lora_rank": 10})
    names = lora_target_names(model)
    for name in ("self_attn.q_a", "self_attn.q_b", "self_attn.kv_a", "self_attn.kv_b", "self_attn.o"):
        assert name in names
    before = model(torch.arange(3, 12)[None]).logits
    paths = add_lora(model, rank=2, alpha=4, dropout=0.0, targets=["self_attn.q_b", "self_attn.kv_b",
                                                                    "self_attn.o"])
    assert len(paths) == 3 * 2
    assert torch.allclose(model(torch.arange(3, 12)[None]).logits, before)  # B = 0: unchanged at start


def test_tracing_records_mla_taps():
    model = _model()
    recorded = trace(model, torch.randint(3, 64, (1, 6)))
    assert recorded.get("weights", layer=0).shape == (1, 4, 6, 6)
    assert recorded.get("attn_output", layer=1).shape == (1, 6, 32)


def test_tensor_parallel_is_refused_naming_the_mixer():
    from zoo.training.tensor_parallel import check_tensor_parallel

    with pytest.raises(ValueError, match="cannot split model.mixer: mla: its latent and rope key"):
        check_tensor_parallel(_model().config, 2, 2)


def test_export_to_a_transformers_family_is_refused_naming_the_mixer(tmp_path):
    """No family zoo converts carries mla yet: one ValueError naming model.mixer (was an AttributeError from
    the first family whose tables read an attention key)."""
    with pytest.raises(ValueError, match=r"No Hugging Face family can represent this zoo model(.|\n)*"
                                         r"cannot express model.mixer='mla' \(would load as 'attention'\)"):
        zoo.save_pretrained(_model(), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("keys", "message"), [
    ({"n_kv_heads": 2}, "model.n_kv_heads=2 is attention's; model.mixer=mla"),
    ({"head_dim": 8}, "model.head_dim=8 is attention's"),
    ({"mixer": {"kv_lora_rank": 56}}, "model.mixer.kv_lora_rank=56 must be smaller than the keys and values "
                                      "it compresses: model.n_heads x (qk_nope_head_dim + v_head_dim) = 4 x "
                                      "(8 + 6) = 56"),
    ({"mixer": {"q_lora_rank": 32}}, "model.mixer.q_lora_rank=32 must be smaller than what it compresses"),
    ({"mixer": {"qk_rope_head_dim": 5}}, "model.mixer.qk_rope_head_dim must be an even integer >= 2"),
    ({"positional": "alibi"}, "model.mixer=mla carries position by rotating its model.mixer.qk_rope_head_dim "
                              "features, which model.positional=alibi does not do"),
    ({"positional": {"name": "rope", "fraction": 0.5}}, "model.positional.fraction=0.5: model.mixer=mla "
                                                        "rotates all of its"),
])
def test_bad_combinations_are_one_error_naming_the_key(keys, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _model(**{k: v for k, v in keys.items() if k != "mixer"}, mixer=keys.get("mixer"))
