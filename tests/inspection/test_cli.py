"""inspect_model.py end to end (Hydra key=value), in a subprocess like a user would run it; its key schema
in-process, composed as the script composes it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .test_plots import assert_png

ROOT = Path(__file__).resolve().parents[2]


def test_inspect_model_cli_prints_tables_and_writes_plots(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "inspect_model.py", "model=transformer_tiny", "model.d_model=32", "model.d_ff=64",
         "text=the cat sat on the mat", "target=le chat", f"hydra.run.dir={out}", "layers=[1]"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "NO tokenizer" in result.stdout  # the fallback id mapping is labelled
    assert "cross_weights" in result.stdout and "parameters" in result.stdout and "FLOPs per token" in result.stdout
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted(
        [f"attention_{k}_layer{i}.png" for k in ("encoder", "decoder", "cross") for i in (0, 1)]
        + ["mask_encoder.png", "mask_decoder.png", "positional.png", "dot_vs_distance.png"])
    for name in names:
        assert_png(out / name)
    rows = json.loads((out / "trace.json").read_text())
    cross = [r for r in rows if r["name"] == "cross_weights"]
    assert [r["shape"] for r in cross] == [[1, 4, 3, 6]] * 2  # <start> le chat x six source words


def test_inspect_model_cli_rejects_unknown_key():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    import inspect_model  # registers the script's schema, `inspect_model`, as running the script does

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("inspect_model", overrides=["model=gpt_nano", "text=hi"])
        assert cfg.text == "hi" and cfg.model.arch == "decoder" and cfg.layers == inspect_model.InspectConfig().layers
        with pytest.raises(ConfigCompositionException, match="Could not override 'txt'") as caught:
            compose("inspect_model", overrides=["model=gpt_nano", "txt=hi"])
    assert "Key 'txt' not in 'InspectConfig'" in str(caught.value.__cause__)


def test_inspect_model_draws_the_new_schemes(tmp_path):
    """Issue 12's schemes in inspect_model: the sliding-window band as its own mask picture (and trace
    record), T5's relative bias as the positional picture, soft-capped scores in the trace."""
    from hydra import compose, initialize_config_dir
    from rich.console import Console

    import inspect_model

    overrides = ["model=gpt_nano", "text=a b c d e f g h", "model.sliding_window=3", "model.global_every=2",
                 "model.positional=t5_relative", "model.attn_softcap=2.0"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("inspect_model", overrides=overrides)
    files = inspect_model.inspect(cfg, tmp_path, Console(width=140, file=open(tmp_path / "out.txt", "w")))
    names = {p.name for p in files}
    assert {"mask_decoder.png", "local_mask_decoder.png", "positional.png"} <= names
    rows = {r["name"]: r for r in json.loads((tmp_path / "trace.json").read_text())}
    assert rows["local_mask"]["shape"] == [1, 2, 8, 8]  # the relative bias is folded into both masks
    for name in ("local_mask_decoder.png", "positional.png"):
        assert_png(tmp_path / name)
