"""inspect_model.py end to end (Hydra key=value), in a subprocess like a user would run it; its key schema
in-process, composed as the script composes it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .test_plots import assert_png

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e  # a subprocess, like the other CLI runs
def test_inspect_model_cli_prints_tables_and_writes_plots(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "inspect_model.py", "model=transformer_tiny", "model.d_model=32", "model.d_ff=64",
         "text=the cat sat on the mat", "target=le chat", f"hydra.run.dir={out}", "layers=[1]"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "NO tokenizer" in result.stdout  # the fallback id mapping is labelled
    assert ("cross_weights" in result.stdout and "parameters" in result.stdout
            and "FLOPs per token" in result.stdout)
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
        assert (cfg.text == "hi" and cfg.model.arch == "decoder"
                and cfg.layers == inspect_model.InspectConfig().layers)
        with pytest.raises(ConfigCompositionException, match="Could not override 'txt'") as caught:
            compose("inspect_model", overrides=["model=gpt_nano", "txt=hi"])
    assert "Key 'txt' not in 'InspectConfig'" in str(caught.value.__cause__)


def test_inspect_model_draws_the_new_schemes(tmp_path):
    """Issue 12's schemes in inspect_model: the sliding-window band as its own mask picture (and trace
    record), T5's relative bias as the positional picture, soft-capped scores in the trace."""
    from hydra import compose, initialize_config_dir
    from rich.console import Console

    import inspect_model

    overrides = ["model=gpt_nano", "text=a b c d e f g h", "model.mixer.sliding_window=3",
                 "model.layer_pattern=[local,global]", "model.positional=t5_relative",
                 "model.mixer.softcap=2.0"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("inspect_model", overrides=overrides)
    files = inspect_model.inspect(cfg, tmp_path, Console(width=140, file=open(tmp_path / "out.txt", "w")))
    names = {p.name for p in files}
    assert {"mask_decoder.png", "local_mask_decoder.png", "positional.png"} <= names
    rows = {r["name"]: r for r in json.loads((tmp_path / "trace.json").read_text())}
    assert rows["local_mask"]["shape"] == [1, 2, 8, 8]  # the relative bias is folded into both masks
    for name in ("local_mask_decoder.png", "positional.png"):
        assert_png(tmp_path / name)


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    import inspect_model  # noqa: F401  (registers the script's schema)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("inspect_model", overrides=overrides)


LONG_TEXT = " ".join(f"w{i}" for i in range(70))  # gpt_nano's learned positions stop at 64
BAD_INPUTS = {  # overrides (model=gpt_nano unless given) -> the one error line; none of them runs the model
    "empty text": (["text=' '"], "error: text is empty; give at least one word"),
    "html is a folder": (["html={tmp}"],
                         "must name the HTML file to write (e.g. html=explorer.html), not a folder"),
    "html under a file": (["html={tmp}/file.txt/page.html"],
                          "file.txt is a file, so the page cannot be written"),
    "html is the user's file": (["html={tmp}/file.txt"],
                                "error: html={tmp}/file.txt exists and is not an explorer page; zoo replaces "
                                "only what it wrote itself, so choose a new path or remove it first."),
    "no beams": (["html={tmp}/p.html", "html_beams=0"], "error: html_beams must be an integer >= 1, got 0."),
    "text past learned positions": ([f"text='{LONG_TEXT}'"],
                                    "error: text reaches position 70 but learned positions stop at "
                                    "model.max_seq_len=64"),
    "target past learned positions": (["model=transformer_tiny", "model.positional=learned",
                                       "model.max_seq_len=8", "text=a b", f"target='{LONG_TEXT}'"],
                                      "target (with <start>) reaches position 71 but learned positions stop"),
    "html_layers out of range": (["html={tmp}/p.html", "html_layers=[0,5]"],
                                 "html_layers=[0, 5]: the model's attention has "
                                 "layers 0..1 in every stack; [5] out of range"),
    "missing checkpoint": (["ckpt={tmp}/none.ckpt"], "error: checkpoint not found: "),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_error_line_before_any_work(case, tmp_path, monkeypatch, capsys):
    """Each bad input: exit code 1 and one `error: ...` line naming the key, raised before the model runs
    (the trace, the first forward, is made to fail) and before anything is printed or written."""
    from rich.console import Console

    import inspect_model

    (tmp_path / "file.txt").write_text("x")
    overrides, message = BAD_INPUTS[case]
    model = [] if any(o.startswith("model=") for o in overrides) else ["model=gpt_nano"]
    cfg = _compose(model + [o.replace("{tmp}", str(tmp_path)) for o in overrides])
    monkeypatch.setattr(inspect_model, "trace", lambda *a, **k: pytest.fail("the model ran before the check"))
    out = tmp_path / "run"
    with open(tmp_path / "console.txt", "w") as log:
        assert inspect_model.run(cfg, out, Console(width=140, file=log)) == 1
    err = capsys.readouterr().err.splitlines()
    message = message.replace("{tmp}", str(tmp_path))
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert ((tmp_path / "console.txt").read_text() == "" and not out.exists()
            and not (tmp_path / "p.html").exists() and (tmp_path / "file.txt").read_text() == "x")


def test_html_replaces_only_its_own_earlier_page(tmp_path):
    from rich.console import Console

    import inspect_model

    (tmp_path / "notes.html").write_text("<p>mine</p>")
    with pytest.raises(inspect_model.InspectError, match="exists and is not an explorer page"):
        inspect_model.check_options(_compose(["model=gpt_nano", f"html={tmp_path / 'notes.html'}"]))
    assert (tmp_path / "notes.html").read_text() == "<p>mine</p>"
    page = tmp_path / "p.html"
    cfg = _compose(["model=gpt_nano", f"html={page}", "plots=false", "html_new_tokens=2", "text=a b"])
    with open(tmp_path / "console.txt", "w") as log:
        assert inspect_model.run(cfg, tmp_path / "run", Console(width=140, file=log)) == 0
        page.write_text(page.read_text() + "<!-- the earlier page -->")
        assert inspect_model.run(cfg, tmp_path / "run", Console(width=140, file=log)) == 0
    assert "the earlier page" not in page.read_text()


def test_a_page_that_cannot_fit_html_max_mb_is_refused_before_anything_is_written(tmp_path, capsys):
    from rich.console import Console

    import inspect_model

    page = tmp_path / "p.html"
    cfg = _compose(["model=gpt_nano", f"html={page}", "html_max_mb=0.001", "html_new_tokens=2"])
    with open(tmp_path / "console.txt", "w") as log:
        assert inspect_model.run(cfg, tmp_path / "run", Console(width=140, file=log)) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: html_max_mb=0.001 is too small for this page"), err
    assert "set html_max_mb=0.0" in err[0]
    assert (not page.exists() and not (tmp_path / "run").exists()
            and (tmp_path / "console.txt").read_text() == "")


@pytest.mark.e2e
def test_cli_prints_one_error_line_and_exits_1(tmp_path):
    """The real script (Hydra and all): no traceback, one line on stderr, exit code 1."""
    result = subprocess.run([sys.executable, "inspect_model.py", "model=gpt_nano", f"html={tmp_path}",
                             "plots=false",
                             f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.splitlines() == [f"error: html={str(tmp_path)!r} must name the HTML file to write "
                                          f"(e.g. html=explorer.html), not a folder."]


@pytest.mark.parametrize("name", ["trace.json", "positional.png"])
def test_out_dir_replaces_only_its_own_trace_and_plots(name, tmp_path, capsys):
    """out_dir= holding a user's file under a name inspect_model.py writes: one error naming out_dir before
    the model runs, the file intact; a second run onto the first run's folder replaces its own files, and
    other files in the folder stay."""
    from PIL import Image
    from rich.console import Console

    import inspect_model

    out = tmp_path / "plots"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    users = out / name
    if name.endswith(".png"):
        Image.new("RGB", (4, 4)).save(users)  # a real PNG, not one of zoo's
    else:
        users.write_text('[{"my": "trace"}]')
    before = users.read_bytes()
    cfg = _compose(["model=gpt_nano", "text=a b", "n_positions=8"])
    with open(tmp_path / "console.txt", "w") as log:
        assert inspect_model.run(cfg, out, Console(width=140, file=log)) == 1
        err = capsys.readouterr().err.splitlines()
        assert err == [f"error: out_dir={out} exists and is not a folder of zoo's inspection plots; zoo "
                       "replaces only its own trace.json and plots (other files stay), so choose a new path "
                       "or remove it first."]
        assert users.read_bytes() == before
        users.unlink()
        assert inspect_model.run(cfg, out, Console(width=140, file=log)) == 0  # writes trace.json and plots
        assert inspect_model.run(cfg, out, Console(width=140, file=log)) == 0  # onto its own: replaced
    assert (out / "notes.txt").read_text() == "mine" and (out / "trace.json").exists()


def test_out_dir_filled_by_an_earlier_zoo_is_still_replaced(tmp_path):
    """Plots written before they carried zoo's tag (matplotlib's own Software text) beside zoo's trace.json
    are an earlier run's: replaced. The same PNG without zoo's trace.json beside it is a user's: refused."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rich.console import Console

    import inspect_model

    out = tmp_path / "plots"
    out.mkdir()
    fig = plt.figure()
    fig.savefig(out / "positional.png")  # matplotlib's default metadata, as zoo's plots were saved
    plt.close(fig)
    cfg = _compose(["model=gpt_nano", "text=a b", "n_positions=8"])
    with open(tmp_path / "console.txt", "w") as log:
        assert inspect_model.run(cfg, out, Console(width=140, file=log)) == 1  # no trace.json: a user's PNG
        (out / "trace.json").write_text('[{"name": "embed", "layer": null, "stream": "decoder", '
                                        '"shape": [1, 2], "module": "Embedding", "kind": "output"}]')
        assert inspect_model.run(cfg, out, Console(width=140, file=log)) == 0
