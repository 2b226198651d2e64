"""The explorer page in a real headless browser (Chromium through playwright): pages written by
inspect_model.py from a decoder, an encoder and an encoder-decoder checkpoint load from file:// with no
console errors; the sampling controls recompute the distribution exactly as zoo.generation.logits does;
the head / layer pickers and hovering change the heatmap; Korean labels arrive intact; screenshots.

Needs Chromium and playwright (CI installs both; see .ci/run). Set ZOO_SCREENSHOTS=docs/img to refresh
the screenshots in the docs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo
from zoo.checkpoint import atomic_torch_save, zoo_section
from zoo.data import TOKENIZERS
from zoo.generation.logits import build_processors, process
from zoo.inspection.explorer.pack import unpack

from .test_explorer import page_data
from .test_plots import assert_png

pytestmark = pytest.mark.e2e  # trains, spawns processes or drives a browser: outside the inner loop

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["the cat sat on the mat", "고양이가 매트 위에 앉았다", "a dog ran far away"]
PROMPT = "고양이가 the cat"
INSTALL = ("Chromium and playwright are needed for the explorer's browser tests. Install them with "
           "`apt-get install -y chromium fonts-noto-cjk` (Debian; the fonts draw Korean) and "
           "`pip install -e '.[dev]'` (playwright; never run `playwright install`), or point ZOO_CHROMIUM at "
           "a Chromium binary.")
ARCHS = {
    "decoder": dict(arch="decoder", positional="learned", task="lm"),
    "encoder": dict(arch="encoder", positional="learned", task="mlm"),
    "encoder_decoder": dict(arch="encoder_decoder", positional="sinusoidal", task="seq2seq"),
}


def chromium_path() -> str:
    found = os.environ.get("ZOO_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found or not Path(found).exists():
        pytest.fail(f"no Chromium binary found. {INSTALL}")
    return found


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"playwright is not installed. {INSTALL}")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield b
        b.close()


def _checkpoint(folder: Path, name: str) -> Path:
    """A checkpoint file zoo.load opens: a tiny untrained model and a character tokenizer (no training)."""
    spec = dict(ARCHS[name])
    task = spec.pop("task")
    tok = TOKENIZERS["char"](TEXTS)
    torch.manual_seed(0)
    model = zoo.build(dict(vocab_size=tok.vocab_size, d_model=16, n_layers=2, n_heads=2, max_seq_len=32,
                           dropout=0.0, **spec)).eval()
    path = folder / f"{name}.ckpt"
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": zoo_section(model.config, task, tok)}, path)
    return path


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """inspect_model.py ckpt=... text=... html=... for each architecture (composed in-process)."""
    from hydra import compose, initialize_config_dir
    from rich.console import Console

    import inspect_model

    folder = tmp_path_factory.mktemp("explorer")
    out = {}
    for name in ARCHS:
        page = folder / f"{name}.html"
        # text quoted: Hydra's override grammar rejects unquoted non-ASCII text
        overrides = [f"ckpt={_checkpoint(folder, name)}", f"text='{PROMPT}'", f"html={page}",
                     "html_new_tokens=4", "plots=false"]
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("inspect_model", overrides=overrides)
        with open(folder / f"{name}.txt", "w") as log:
            inspect_model.inspect(cfg, folder / name, Console(width=140, file=log))
        out[name] = page
    return out


def open_page(browser, path: Path):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    problems: list[str] = []
    page.on("console",
            lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request",
            lambda r: problems.append(f"request: {r.url}") if not r.url.startswith(("file:", "data:"))
            else None)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return page, problems


def shoot(page, selector: str, name: str, folder: Path) -> None:
    """Screenshot one section; also into $ZOO_SCREENSHOTS (e.g. docs/img) when set."""
    target = folder / f"explorer_{name}.png"
    page.locator(selector).screenshot(path=str(target))
    assert_png(target, max_bytes=400_000)
    if os.environ.get("ZOO_SCREENSHOTS"):
        shutil.copy(target, Path(os.environ["ZOO_SCREENSHOTS"]) / target.name)


@pytest.mark.parametrize("name", list(ARCHS))
def test_page_loads_and_draws_every_part(browser, pages, name, tmp_path):
    page, problems = open_page(browser, pages[name])
    try:
        assert problems == []
        kinds = page.eval_on_selector_all("#attn-kind option", "os => os.map(o => o.value)")
        assert kinds == {"decoder": ["decoder"], "encoder": ["encoder"],
                         "encoder_decoder": ["encoder", "decoder", "cross"]}[name]
        stream = "decoder" if name == "decoder" else "encoder"
        chips = page.eval_on_selector_all(f".token-row[data-stream='{stream}'] .tok .label",
                                          "es => es.map(e => e.textContent)")
        assert "".join(chips).replace("·", " ") == PROMPT  # Korean arrives intact, in order
        assert page.locator("#mask-list canvas").count() >= 1 and page.locator("#pos-canvas").count() == 1
        assert page.locator("#trace-table tbody tr").count() > 10
        assert (page.locator("#param-table tbody tr").count() == 6
                and page.locator("#flop-table tbody tr").count() == 6)
        if name == "encoder":
            assert "does not generate" in page.inner_text("#beam-body")
        else:
            assert page.locator("#beam-svg .beam-node").count() > 5
            assert page.locator("#beam-table tbody tr").count() == 4  # greedy + 3 beams
        shoot(page, "#attention", f"{name}_attention", tmp_path)
        if name != "encoder":
            shoot(page, "#beams", f"{name}_beams", tmp_path)
    finally:
        page.close()


def test_head_and_layer_pickers_and_hover_change_the_heatmap(browser, pages, tmp_path):
    page, problems = open_page(browser, pages["encoder_decoder"])
    try:
        pixels = lambda: page.eval_on_selector("#attn-canvas", "c => c.toDataURL()")  # noqa: E731
        first = pixels()
        page.select_option("#attn-head", "1")
        assert page.get_attribute("#attn-canvas", "data-head") == "1" and pixels() != first
        after_head = pixels()
        page.select_option("#attn-layer", "1")
        assert pixels() != after_head
        page.hover(".token-row[data-stream='encoder'] .tok >> nth=2")  # hovering a query token picks its row
        assert page.inner_text("#attn-readout").startswith(f'query "{PROMPT[2]}" (position 2)')
        page.select_option("#attn-kind", "cross")
        assert page.get_attribute("#attn-canvas", "data-kind") == "cross"
        box = page.locator("#attn-canvas").bounding_box()
        before = pixels()
        page.mouse.move(box["x"] + box["width"] - 5, box["y"] + box["height"] - 8)  # the last query row
        assert page.inner_text("#attn-readout").startswith('query "') and pixels() != before
        assert page.locator("#attn-keys .tok").count() == len(PROMPT)  # cross: keys are the source tokens
        shoot(page, "#attention", "encoder_decoder_cross_hover", tmp_path)
        assert problems == []
    finally:
        page.close()


def _zoo_probs(logits: np.ndarray, t: float, k: int, p: float) -> np.ndarray:
    """zoo.generation's sampling distribution for these settings (temperature 0 = greedy's arg-max)."""
    x = torch.tensor(logits)[None]
    if t == 0:
        return torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1])[0].double().numpy()
    return process(x, build_processors(t, k or None, p)).softmax(-1)[0].double().numpy()


@pytest.mark.parametrize("name", ["decoder", "encoder_decoder"])
def test_javascript_filters_equal_zoo_sampling(browser, pages, name):
    page, problems = open_page(browser, pages[name])
    try:
        stored = page_data(pages[name].read_text(encoding="utf-8"))["logits"]
        logits = unpack(stored["values"])  # numpy's float16 decoding: the page must decode the same numbers
        js_logits = np.array(page.evaluate("(() => { const u = "
                                           "zooExplorer.unpack(zooExplorer.data.logits.values); return "
                                           "Array.from(u.values); })()")).reshape(logits.shape)
        np.testing.assert_array_equal(js_logits, logits)
        for slot in (0, len(stored["positions"]) - 1):
            for t, k, p in [(1.0, 0, 1.0), (0.7, 0, 1.0), (2.5, 5, 1.0), (1.0, 0, 0.35), (0.5, 8, 0.6),
                            (0.0, 0, 1.0), (1.3, 1, 0.9), (1.0, 3, 0.05)]:
                js = np.array(page.evaluate(f"zooExplorer.distribution({slot}, {t}, {k}, {p})"))
                zoo_p = _zoo_probs(logits[slot], t, k, p)
                # the same tokens survive the cut-offs
                assert ((js > 0) == (zoo_p > 0)).all(), (slot, t, k, p)
                np.testing.assert_allclose(js, zoo_p, atol=1e-6, err_msg=str((slot, t, k, p)))
        assert problems == []
    finally:
        page.close()


def test_temperature_slider_and_cutoffs_redraw_the_bars(browser, pages, tmp_path):
    page, problems = open_page(browser, pages["decoder"])
    try:
        def bars() -> dict[int, float]:
            rows = page.eval_on_selector_all("#dist-table tbody tr",
                                             "rs => rs.map(r => [Number(r.dataset.id), "
                                             "Number(r.querySelector('.p').textContent)])")
            return dict(rows)

        stored = page_data(pages["decoder"].read_text(encoding="utf-8"))["logits"]
        logits = unpack(stored["values"])[-1]
        at_one = bars()
        page.fill("#temperature", "0.3")  # a range input: fill sets the value and fires input
        cooled = bars()
        assert page.inner_text("#temperature-value") == "0.30" and cooled != at_one
        expected = _zoo_probs(logits, 0.3, 0, 1.0)
        for token, shown in cooled.items():
            assert shown == pytest.approx(expected[token], abs=6e-5)  # printed with 4 decimals
        page.fill("#top-k", "2")
        page.dispatch_event("#top-k", "input")
        kept = [t for t, v in bars().items() if v > 0]
        assert len(kept) == 2 and "2 of" in page.inner_text("#dist-summary")
        assert page.locator("#dist-table tbody tr").count() == 20  # the 20 best by logit, cut ones greyed
        shoot(page, "#distribution", "decoder_distribution", tmp_path)
        assert problems == []
    finally:
        page.close()


def test_markup_in_the_text_cannot_swallow_the_script(browser, tmp_path):
    """`<!--<script` in the text once put the parser in a state where the data element's </script> did not
    end it, so the page's script became data: a blank page and no error (issue 28). It runs, and shows the
    text as text."""
    from hydra import compose, initialize_config_dir
    from rich.console import Console

    import inspect_model

    text = "a <!--<script b </script> c"
    path = tmp_path / "markup.html"
    overrides = ["model=gpt_nano", f"text='{text}'", f"html={path}", "html_new_tokens=2", "plots=false"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("inspect_model", overrides=overrides)
    with open(tmp_path / "out.txt", "w") as log:
        inspect_model.inspect(cfg, tmp_path, Console(width=140, file=log))
    page, problems = open_page(browser, path)
    try:
        chips = page.eval_on_selector_all(".token-row[data-stream='decoder'] .tok .label",
                                          "es => es.map(e => e.textContent)")
        assert chips == text.split() and text in page.inner_text("#source")
        assert page.locator("#attn-canvas").get_attribute("data-kind") == "decoder"
        assert problems == []
    finally:
        page.close()


def test_pages_held_to_a_small_html_max_mb_still_run(browser, tmp_path):
    """The smallest page (every optional part left out) and one that keeps two of eight heads of one layer:
    both run without errors, say what was left out, and the head picker names the stored heads."""
    from zoo.inspection.explorer import explorer_data, write_page
    from zoo.inspection.explorer.budget import PageBudgetError

    torch.manual_seed(0)
    model = zoo.build(dict(arch="decoder", vocab_size=40, d_model=32, n_layers=2, n_heads=8,
                           positional="rope", dropout=0.0)).eval()
    ids = [5 + i % 30 for i in range(48)]

    def write(mb: float, name: str) -> Path:
        data = explorer_data(model, ids, tokens=[f"t{i}" for i in ids], vocab_label=str, max_mb=mb,
                             max_new_tokens=2)
        return write_page(data, tmp_path / name)

    with pytest.raises(PageBudgetError) as refused:
        write(0.001, "never.html")
    least = float(str(refused.value).split("set html_max_mb=")[1].split()[0])
    page, problems = open_page(browser, write(least, "least.html"))
    try:
        assert "left out to stay within html_max_mb" in page.inner_text("#attention")
        assert "left out to stay within html_max_mb" in page.inner_text("#mask-list")
        assert "logits were left out" in page.inner_text("#dist-summary")
        assert "positional pattern was left out" in page.inner_text("#pos-body")
        assert page.locator("#notes li").count() == 4 and page.locator("#dist-table tbody tr").count() == 0
        assert problems == []
    finally:
        page.close()
    page, problems = open_page(browser, write(least + 0.025, "heads.html"))
    try:
        heads = page.eval_on_selector_all("#attn-head option", "os => os.map(o => o.textContent)")
        assert heads == ["head 0", "head 7", "mean of the 2 stored heads"]
        assert (page.locator("#mask-list canvas").count() == 1
                and page.locator("#dist-table tbody tr").count() > 0)
        first = page.eval_on_selector("#attn-canvas", "c => c.toDataURL()")
        page.select_option("#attn-head", "1")
        assert page.eval_on_selector("#attn-canvas", "c => c.toDataURL()") != first
        assert "heads [0, 7] of 0..7" in page.inner_text("#notes") and problems == []
    finally:
        page.close()


def test_a_missing_chromium_fails_with_install_instructions(monkeypatch):
    monkeypatch.setenv("ZOO_CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(pytest.fail.Exception, match=r"apt-get install -y chromium fonts-noto-cjk"):
        chromium_path()


def test_moe_experts_table_shows_each_tokens_experts(browser, tmp_path):
    """A Mixture-of-Experts model's page has one row per MoE layer and one cell per token naming its experts
    and weights, as the data says; a dense model's page says it has none."""
    from zoo.inspection.explorer import explorer_data, render

    torch.manual_seed(0)
    model = zoo.build(dict(vocab_size=40, d_model=16, n_layers=2, n_heads=2, max_seq_len=32, dropout=0.0,
                           ffn={"name": "moe", "n_experts": 4, "top_k": 2})).eval()
    data = explorer_data(model, [5, 6, 7], tokens=["a", "b", "c"], vocab_label=str, num_beams=2,
                         max_new_tokens=2)
    path = tmp_path / "moe.html"
    path.write_text(render(data), encoding="utf-8")
    page, problems = open_page(browser, path)
    try:
        rows = page.eval_on_selector_all(".experts-table tbody tr",
                                         "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
        assert [row[0] for row in rows] == ["decoder.0", "decoder.1"]
        first = data["experts"][0]
        pairs = zip(first["experts"][0], first["weights"][0], strict=True)
        assert rows[0][1] == " / ".join(f"e{e} {w:.2f}" for e, w in pairs)
        assert problems == []
    finally:
        page.close()
    dense = tmp_path / "dense.html"
    dense.write_text(render(explorer_data(zoo.build(dict(vocab_size=40, d_model=16, n_layers=1, n_heads=2)),
                                          [5, 6], tokens=["a", "b"], vocab_label=str, num_beams=2,
                                          max_new_tokens=2)), encoding="utf-8")
    page, problems = open_page(browser, dense)
    try:
        assert "no Mixture-of-Experts layer" in page.inner_text("#experts-body") and problems == []
    finally:
        page.close()
