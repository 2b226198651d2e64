"""Attention maps come from the real weights path; every picture is a valid, readable, small PNG; the
positional pictures plot the closed forms."""

import math

import matplotlib.pyplot as plt
import pytest
import torch

import zoo
from zoo.inspection import attention_maps, plots, trace
from zoo.modules.positional import POSITIONALS

from .configs import VOCAB, config

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path, max_bytes=100_000):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert len(data) < max_bytes, (path, len(data))
    image = plt.imread(path)  # matplotlib reads it back
    assert image.ndim == 3 and image.shape[0] > 20 and image.shape[1] > 20


def test_attention_maps_per_kind_match_the_trace_and_plot(tmp_path):
    cfg = config("transformer")
    model = zoo.build(cfg).eval()
    src, tgt = torch.randint(3, VOCAB, (1, 6)), torch.randint(3, VOCAB, (1, 4))
    maps = attention_maps(model, src, tokens=list("abcdef"), decoder_tokens=list("wxyz"),
                          decoder_input_ids=tgt)
    assert maps.kinds() == ["encoder", "decoder", "cross"]
    assert [tuple(w.shape) for w in maps.maps["cross"]] == [(1, cfg.n_heads, 4, 6)] * cfg.n_decoder_layers
    assert [tuple(w.shape) for w in maps.maps["encoder"]] == [(1, cfg.n_heads, 6, 6)] * cfg.n_encoder_layers
    assert maps.axes("cross") == (list("wxyz"), list("abcdef"))
    tr = trace(model, src, decoder_input_ids=tgt)
    for layer in range(cfg.n_encoder_layers):
        torch.testing.assert_close(maps.maps["encoder"][layer],
                                   tr.get("weights", layer=layer, stream="encoder").tensor)
    torch.testing.assert_close(maps.maps["cross"][0], tr.get("cross_weights", layer=0).tensor)
    written = plots.save_attention_maps(maps, tmp_path)
    assert sorted(p.name for p in written) == sorted(
        [f"attention_encoder_layer{i}.png" for i in range(2)] + ["attention_decoder_layer0.png",
                                                                 "attention_cross_layer0.png"])
    for path in written:
        assert_png(path)


def test_decoder_attention_is_causal_and_the_mask_picture(tmp_path):
    cfg = config("llama_gqa")
    model = zoo.build(cfg).train()  # attention_maps switches to eval and back
    ids = torch.randint(3, VOCAB, (1, 6))
    maps = attention_maps(model, ids)
    assert model.training and list(maps.maps) == ["decoder"]
    w = maps.maps["decoder"][1][0]  # (H, T, T)
    assert torch.all(w.triu(1) == 0.0)
    torch.testing.assert_close(w.sum(-1), torch.ones(cfg.n_heads, 6))
    mask = trace(model.eval(), ids).get("mask").tensor[0, 0]
    assert torch.equal(torch.isinf(mask), torch.ones(6, 6, dtype=torch.bool).triu(1))
    assert_png(plots.plot_mask(mask, tmp_path / "mask.png", labels=list("abcdef")))
    with pytest.raises(ValueError, match="heads, Tq, Tk"):
        plots.plot_attention_grid(w[0], tmp_path / "bad.png")


@pytest.mark.parametrize("positional", POSITIONALS.names())
def test_positional_pattern_pictures(tmp_path, positional):
    """Every registered scheme draws itself (32 position rows) or says it has nothing to draw."""
    cfg = config("gpt", positional=positional, max_seq_len=32)
    drawn = plots.positional_pattern(cfg, 32)
    path = plots.plot_positional_pattern(cfg, tmp_path / f"{positional}.png", n_positions=32)
    if drawn is None:
        assert path is None and not (tmp_path / f"{positional}.png").exists()
        return
    assert drawn[0].shape[0] == 32 and torch.isfinite(drawn[0]).all()
    assert_png(path)


def test_learned_pattern_reads_the_models_trained_table():
    model = zoo.build(config("gpt", positional="learned", max_seq_len=32))
    with torch.no_grad():
        model.positions.table.weight[3, 1] = 7.5
    matrix, _ = plots.positional_pattern(model.config, 32, module=model.positions)
    assert matrix[3, 1].item() == 7.5


def test_sinusoidal_pattern_is_the_paper_formula():
    cfg = config("gpt", positional={"name": "sinusoidal", "layout": "interleaved"})
    pe, _ = plots.positional_pattern(cfg, 20)
    d = cfg.d_model
    for pos, i in [(0, 0), (3, 1), (7, 5), (19, 15)]:
        angle = pos / 10000 ** (2 * i / d)
        assert math.isclose(pe[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
        assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_dot_product_vs_distance_closed_forms(tmp_path):
    dim, k_max = 16, 40
    dist, sin_dots = plots.dot_vs_distance("sinusoidal", dim, k_max)
    _, rope_dots = plots.dot_vs_distance("rope", dim, k_max)
    for k in [0, 1, 5, 17, 40]:
        freqs = [10000 ** (-2 * i / dim) for i in range(dim // 2)]
        assert math.isclose(sin_dots[k].item(), sum(math.cos(w * k) for w in freqs), abs_tol=1e-4)
        assert math.isclose(rope_dots[k].item(), 2 * sum(math.cos(w * k) for w in freqs), abs_tol=1e-4)
    assert dist.tolist() == list(range(k_max + 1))
    assert sin_dots[0].item() == pytest.approx(dim / 2) and rope_dots[0].item() == pytest.approx(dim)
    assert_png(plots.plot_dot_vs_distance(tmp_path / "dot.png", dim=dim, max_distance=k_max))
    assert plots.similarity_schemes(dim) == ["rope", "sinusoidal"]
    with pytest.raises(ValueError, match="Allowed: rope, sinusoidal"):
        plots.dot_vs_distance("alibi", dim, k_max)
