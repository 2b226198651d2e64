"""The `quantize*` keys of generate.py and serve.py (zoo.quantization.options): bad values refused before the
checkpoint is opened, a model the kernel cannot take refused naming the layer before any generation, and
the quantised model's output equal to the library's on the same weights."""

from __future__ import annotations

import copy
import io

import pytest
import torch

import zoo
from tests.generation.test_cli import _checkpoint
from zoo.generate_cli import main as generate_main
from zoo.generate_cli import parse_overrides as generate_overrides
from zoo.quantization import Int4Linear, Int8Linear
from zoo.quantization.options import QuantizeOptions


@pytest.mark.parametrize("argv, match", [
    (["quantize=int3"], r"quantize=int3: Unknown quantization method 'int3'. Did you mean 'int8'\? "
                        "Allowed: int4, int8"),
    (["quantize=int8", "quantize_group_size=64"], "quantize_group_size= is not read by quantize=int8 "
                                                  r"\(its keys: none\)"),
    (["quantize=int4", "quantize_group_size=48"], "group_size=48 is not one torch's int4 CPU kernel takes; "
                                                  "allowed: 32, 64, 128, 256"),
    (["quantize_group_size=64"], "quantize_group_size=64 configures quantize=...; give quantize=int8 or "
                                 "quantize=int4 with it"),
    (["quantize_head=false"], "quantize_head=false configures quantize="),
    (["quantize=int4", "quantize_group_size=many"], "quantize_group_size='many' is not an integer or null"),
])
def test_bad_quantize_keys_are_refused_before_loading(argv, match):
    """generate.py and serve.py word them alike (one parser, one check); ckpt=x does not exist, so an error
    about the file would mean the check came too late."""
    from zoo.serving.cli import parse_overrides as serve_overrides

    with pytest.raises(ValueError, match=match):
        generate_overrides(["ckpt=x", "prompt=a", *argv])
    with pytest.raises(ValueError, match=match):
        serve_overrides(["ckpt=x", *argv])


def test_a_cpu_only_method_on_another_device_is_refused():
    with pytest.raises(ValueError, match="quantize=int4 runs on torch's CPU kernel only; device=cuda cannot"):
        QuantizeOptions(quantize="int4").check_quantize("cuda")
    QuantizeOptions(quantize="int8").check_quantize("cuda")  # int8 has a path off the CPU


def test_generate_quantized_matches_the_library(tmp_path):
    """generate.py quantize=int8 prints what zoo.quantize(model, "int8").generate gives on the same ids; the
    tiny checkpoint (d_model 16) is one int4 cannot take, refused naming the layer and the group sizes."""
    path, model, tok = _checkpoint(tmp_path, "decoder")
    out = io.StringIO()
    generate_main([f"ckpt={path}", "prompt=the cat", "max_new_tokens=6", "quantize=int8"], stdout=out)
    ids = tok.encode("the cat")
    quantized = zoo.quantize(copy.deepcopy(model), "int8")
    expected = quantized.generate([ids], max_new_tokens=6, eos_token_id=tok.eos_id)[0, len(ids):]
    assert out.getvalue().splitlines() == [">>> the cat", "the cat" + tok.decode(expected)]
    with pytest.raises(ValueError, match=r"layer decoder_stack.layers.0.self_attn.qkv \(16 -> 48\) cannot be "
                                         r"quantised: in_features 16 is not a multiple of group_size 128 "
                                         r"\(group sizes that divide it: none of 32, 64, 128, 256\)"):
        generate_main([f"ckpt={path}", "prompt=the cat", "quantize=int4"], stdout=io.StringIO())


def test_serve_quantizes_the_model_it_opens(tmp_path, monkeypatch):
    """serve.py quantize=int4 quantize_group_size=32 quantize_head=false: the model handed to the engine has
    int4 layers and a float head."""
    pytest.importorskip("fastapi")
    from zoo.serving import cli

    torch.manual_seed(0)
    model = zoo.build(dict(arch="decoder", vocab_size=64, d_model=32, n_layers=1, n_heads=2,
                           positional="rope", max_seq_len=32, dropout=0.0)).eval()
    folder = zoo.save_pretrained(model, tmp_path / "hf")
    seen = {}
    monkeypatch.setattr(cli, "served_model", lambda m, *a, **k: seen.setdefault("model", m))
    monkeypatch.setattr("zoo.tokenizers.load_hf_tokenizer", lambda folder: None)
    cfg = cli.parse_overrides([f"hf={folder}", "quantize=int4", "quantize_group_size=32",
                               "quantize_head=false"])
    cli.open_served(cfg)
    served = seen["model"]
    assert isinstance(served.decoder_stack.layers[0].ffn.down, Int4Linear)
    assert type(served.head.proj) is torch.nn.Linear
    assert not any(isinstance(m, Int8Linear) for m in served.modules())
