"""The explorer's data (no browser): the beam tree against a hand-made probability tree and against plain
teacher-forced forwards, packing round trips, the size budget, the inlined page (nothing fetched, data
that cannot end its script element) and inspect_model.py's html= key."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo
from tests.generation.test_tree import BOS, EOS, PAD, TREE, A, B, C, D, E, TreeLM
from zoo import ModelOutput
from zoo.inspection.explorer import explorer_data, render, vocab_labeller
from zoo.inspection.explorer.beams import beam_tree
from zoo.inspection.explorer.budget import PageBudgetError, spaced
from zoo.inspection.explorer.pack import pack_float16, pack_unit, unpack

ROOT = Path(__file__).resolve().parents[2]


def tiny(arch: str, **kw) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = dict(arch=arch, vocab_size=40, d_model=16, n_layers=2, n_heads=2, positional="rope", max_seq_len=32,
               dropout=0.0) | kw
    return zoo.build(cfg).eval()


def page_data(html: str) -> dict:
    """The JSON the page parses, cut out of the HTML the way the browser does (up to the first </script)."""
    body = re.search(r'<script type="application/json" id="zoo-data">(.*?)</script', html, re.S).group(1)
    return json.loads(body)


class CausalTreeLM(TreeLM):
    """TreeLM with a distribution at every position (from the tokens up to it), so a teacher-forced
    forward reads the tree the way step-by-step decoding does."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, logits_to_keep=0):
        rows = []
        for row in input_ids.tolist():
            per_position = []
            for t in range(len(row)):
                probs = torch.zeros(9)
                prefix = tuple(tok for tok in row[1:t + 1] if tok != PAD)
                for token, p in self.tree.get(prefix, {EOS: 1.0}).items():
                    probs[token] = p
                per_position.append(probs.log())
            rows.append(torch.stack(per_position))
        return ModelOutput(logits=torch.stack(rows))


def test_beam_tree_matches_the_hand_made_tree():
    """TREE: greedy takes A (0.5) then C (0.4) = 0.20; two beams find B C = 0.36. Node log-probs are the
    tree's own numbers; the root lists A, B, EOS as candidates."""
    tree = beam_tree(CausalTreeLM(TREE), [BOS], label=lambda i: "PBEABCDE?"[i], num_beams=2, max_new_tokens=5,
                     eos_ids=[EOS], use_cache=False, alternatives=3)
    hyp = {h["name"]: h for h in tree["hypotheses"]}
    assert hyp["greedy"]["tokens"] == [A, C, EOS] and hyp["beam 1"]["tokens"] == [B, C, EOS]
    assert hyp["beam 2"]["tokens"] == [A, C, EOS]
    assert hyp["greedy"]["sum_logp"] == pytest.approx(math.log(0.20), abs=1e-6)
    assert hyp["beam 1"]["sum_logp"] == pytest.approx(math.log(0.36), abs=1e-6)
    # zoo's length-normalised score
    assert hyp["beam 1"]["score"] == pytest.approx(math.log(0.36) / 3, abs=1e-6)
    nodes = tree["nodes"]
    root_children = {n["token"]: n for n in nodes if n["parent"] == 0}
    assert set(root_children) == {A, B, EOS}
    assert (root_children[A]["logp"] == pytest.approx(math.log(0.5))
            and root_children[B]["paths"] == ["beam 1"])
    assert root_children[EOS]["paths"] == []  # a candidate no hypothesis took
    a_children = {n["token"]: n["logp"] for n in nodes if n["parent"] == root_children[A]["id"]}
    assert a_children == pytest.approx({C: math.log(0.4), D: math.log(0.3), E: math.log(0.3)})
    assert sorted(root_children[A]["paths"]) == ["beam 2", "greedy"]


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_beam_tree_log_probs_equal_a_plain_forward(arch):
    """Each hypothesis' Σ log p equals a teacher-forced forward of the whole sequence (no stepper, no cache),
    and zoo's beam score equals that sum over length ** length_penalty."""
    model = tiny(arch)
    source = [5, 9, 12, 7]
    tree = beam_tree(model, source, label=str, num_beams=2, max_new_tokens=3, eos_ids=[2], length_penalty=0.5)
    for h in tree["hypotheses"]:
        tokens = h["tokens"]
        with torch.no_grad():
            if arch == "decoder":
                logits = model(torch.tensor([source + tokens])).logits[0, len(source) - 1:-1]
            else:
                dec = [model.config.start_id] + tokens
                logits = model(torch.tensor([source]), decoder_input_ids=torch.tensor([dec[:-1]])).logits[0]
        expected = logits.log_softmax(-1)[torch.arange(len(tokens)), tokens].sum().item()
        assert h["sum_logp"] == pytest.approx(expected, abs=1e-4), h["name"]
        if "score" in h:
            assert h["score"] == pytest.approx(expected / len(tokens) ** 0.5, abs=1e-4), h["name"]
    greedy = tree["hypotheses"][0]
    nodes = tree["nodes"]
    for node_id in greedy["nodes"][1:]:  # greedy: every step is its parent's most likely child
        siblings = [n["logp"] for n in nodes if n["parent"] == nodes[node_id]["parent"]]
        assert nodes[node_id]["logp"] == pytest.approx(max(siblings))


def test_beam_tree_past_a_learned_position_window_matches_zoo_scores():
    """Learned positions stop at max_seq_len=6; prompt 4 + 4 new tokens outgrow it, so decoding crops its
    window (and drops the cache) and the tree's log-probabilities must follow: Σ log p / len = zoo's score."""
    model = tiny("decoder", positional="learned", max_seq_len=6)
    tree = beam_tree(model, [5, 9, 12, 7], label=str, num_beams=2, max_new_tokens=4, eos_ids=[])
    for h in tree["hypotheses"][1:]:
        assert len(h["tokens"]) == 4
        assert h["sum_logp"] / 4 == pytest.approx(h["score"], abs=1e-5), h["name"]


def test_packing_round_trips_against_numpy():
    x = torch.tensor([[0.0, 1.0, 0.25, 1 / 3], [0.999, 1e-5, 0.5, 0.0]])
    assert np.abs(unpack(pack_unit(x)) - x.numpy()).max() <= 0.5 / 65535 + 1e-9
    y = torch.tensor([-3.14159, 65504.0, -float("inf"), 1e-4])
    np.testing.assert_array_equal(unpack(pack_float16(y)), y.numpy().astype(np.float16).astype(np.float32))


def test_every_part_is_collected_for_an_encoder_decoder():
    model = tiny("encoder_decoder", encoder_layers=2, decoder_layers=1)
    src, dec = [5, 6, 7, 8, 9], [model.config.start_id, 10, 11]
    data = explorer_data(model, src, tokens=list("abcde"), vocab_label=str, decoder_ids=dec, num_beams=2,
                         max_new_tokens=3)
    assert set(data["attention"]) == {"encoder", "decoder", "cross"}
    assert data["attention"]["cross"]["weights"]["shape"] == [1, 2, 3, 5]  # (L, H, Tq=decoder, Tk=source)
    weights = unpack(data["attention"]["encoder"]["weights"])
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-3)  # softmax rows survive the packing
    assert [(m["name"], m["stream"]) for m in data["masks"]] == [("mask", "encoder"), ("mask", "decoder"),
                                                                 ("cross_mask", "decoder")]
    causal = np.isfinite(unpack(data["masks"][1]["values"]))
    np.testing.assert_array_equal(causal, np.tril(np.ones((3, 3), dtype=bool)))  # decoder: keys j <= i
    assert (np.isfinite(unpack(data["masks"][0]["values"])).all()
            and np.isfinite(unpack(data["masks"][2]["values"])).all())
    assert data["logits"]["stream"] == "decoder" and data["logits"]["positions"] == [0, 1, 2]
    assert data["tokens"]["decoder"][0]["id"] == model.config.start_id
    assert [r["name"] for r in data["trace"]][:1] == ["input_ids"]
    assert data["params"]["total"] == sum(p.numel() for p in model.parameters())
    assert data["beams"]["hypotheses"][0]["name"] == "greedy"
    assert data["notes"] == []


def test_sliding_window_and_alibi_masks_are_the_closed_forms():
    """Window 2: query i sees keys i-1, i; ALiBi folds -slope_h * (i - j) into the mask (head 0 kept)."""
    model = tiny("decoder", n_layers=2, mixer={"sliding_window": 2}, layer_pattern=["local", "global"],
                 positional="alibi")
    data = explorer_data(model, [5, 6, 7, 8], tokens=list("abcd"), vocab_label=str, max_new_tokens=1)
    masks = {m["name"]: unpack(m["values"]) for m in data["masks"]}
    i, j = np.indices((4, 4))
    np.testing.assert_array_equal(np.isfinite(masks["local_mask"]), (i - j >= 0) & (i - j < 2))
    slope = 2.0 ** (-8.0 / 2)  # head 0 of 2 heads: 2^(-8/H)
    expected = np.where(j <= i, -slope * (i - j), -np.inf)
    np.testing.assert_allclose(masks["mask"], expected, atol=2e-3)  # float16 storage


def test_encoder_has_no_beam_tree_and_says_why():
    data = explorer_data(tiny("encoder", positional="learned"), [5, 6, 7], tokens=["x", "y", "z"],
                         vocab_label=str)
    assert "does not generate" in data["beams"]["note"] and set(data["attention"]) == {"encoder"}
    classifier = tiny("encoder", positional="learned", head={"name": "classifier", "num_labels": 3})
    logits = explorer_data(classifier, [5, 6, 7], tokens=["x", "y", "z"], vocab_label=str)["logits"]
    assert logits["positions"] == [0] and logits["vocab_size"] == 3 and logits["labels"]["2"] == "label 2"


def page_bytes(data: dict) -> int:
    """Bytes of the page file written from `data`."""
    return len(render(data).encode("utf-8"))


def smallest_allowed(refused: PageBudgetError) -> float:
    return float(re.search(r"set html_max_mb=([0-9.]+) or more", str(refused)).group(1))


def test_spaced_picks_evenly_with_both_ends():
    assert (spaced(range(5), 3) == [0, 2, 4] and spaced([1, 3, 7], 2) == [1, 7]
            and spaced(range(8), 3) == [0, 4, 7])
    assert spaced([4, 9], 1) == [4] and spaced([4, 9], 5) == [4, 9]


def test_page_size_is_held_to_html_max_mb_and_the_notes_say_what_was_left_out():
    """html_max_mb caps the written file, everything counted (template, script, masks, notes): at budgets from
    the smallest page to the full one the page fits, and every layer, head, position, mask left out is named
    in the notes; what is kept is the full page's numbers for those layers / positions."""
    model = tiny("decoder", n_layers=5, vocab_size=400)
    ids = list(range(5, 17))

    def collect(mb: float) -> dict:
        return explorer_data(model, ids, tokens=[str(i) for i in ids], vocab_label=str, max_mb=mb,
                             max_new_tokens=1)

    full = collect(4.0)
    assert full["notes"] == [] and full["attention"]["decoder"]["layers"] == [0, 1, 2, 3, 4]
    assert full["logits"]["positions"] == list(range(12)) and all(m["values"] for m in full["masks"])
    with pytest.raises(PageBudgetError,
                       match=r"html_max_mb=0\.01 is too small .* takes 0\.04\d MB") as refused:
        collect(0.01)
    least = smallest_allowed(refused.value)
    full_weights, full_logits = (unpack(full["attention"]["decoder"]["weights"]),
                                 unpack(full["logits"]["values"]))
    seen_partial = set()
    for mb in np.linspace(least, page_bytes(full) / 1e6, 7)[:-1]:
        data = collect(float(mb))
        assert page_bytes(data) <= mb * 1e6, mb
        notes = " | ".join(data["notes"])
        att, logits = data["attention"]["decoder"], data["logits"]
        if att["weights"] is None:
            assert "decoder attention left out: one head of one layer takes" in notes
        else:
            assert (att["layers"] == spaced(range(5), len(att["layers"]))
                    and att["heads"] == spaced(range(2), len(att["heads"])))
            np.testing.assert_array_equal(unpack(att["weights"]),
                                          full_weights[att["layers"]][:, att["heads"]])
            if (len(att["layers"]), len(att["heads"])) != (5, 2):
                assert (f"decoder attention: layers {att['layers']} of 0..4" in notes
                        and "html_layers=[...]" in notes)
                seen_partial.add("attention")
        n = len(logits["positions"])
        if n == 0:
            assert logits["values"] is None and "next-token logits left out" in notes
        else:
            assert logits["positions"] == list(range(12 - n, 12))
            np.testing.assert_array_equal(unpack(logits["values"]), full_logits[12 - n:])
            if n < 12:
                assert f"logits kept for positions {12 - n}..11 of 0..11" in notes
                seen_partial.add("logits")
        assert (data["masks"][0]["values"] is None) == ("decoder mask left out" in notes)
        assert ("html_max_mb=" in notes) == (data["notes"] != [])
    assert seen_partial == {"attention", "logits"}
    nothing = collect(least)  # the smallest page: every optional part left out, and said
    assert nothing["attention"]["decoder"]["weights"] is None and nothing["logits"]["values"] is None
    assert page_bytes(nothing) <= least * 1e6


def test_a_layer_larger_than_the_budget_keeps_evenly_spaced_heads():
    model = tiny("decoder", n_heads=8, d_model=32, max_seq_len=64)
    ids = [5 + i % 30 for i in range(48)]  # one head: 48 x 48 weights (6 kB), one layer 49 kB

    def collect(mb: float) -> dict:
        return explorer_data(model, ids, tokens=[str(i) for i in ids], vocab_label=str, max_mb=mb,
                             max_new_tokens=1)

    with pytest.raises(PageBudgetError) as refused:
        collect(0.001)
    mb = smallest_allowed(refused.value) + 0.04
    data = collect(mb)
    att = data["attention"]["decoder"]
    assert page_bytes(data) <= mb * 1e6
    assert (att["layers"] == [0] and 1 < len(att["heads"]) < 8
            and att["heads"] == spaced(range(8), len(att["heads"])))
    full = unpack(collect(4.0)["attention"]["decoder"]["weights"])
    np.testing.assert_array_equal(unpack(att["weights"])[0], full[0, att["heads"]])
    assert any(f"layers [0] of 0..1, heads {att['heads']} of 0..7 kept" in n for n in data["notes"])


def test_html_layers_are_candidates_within_the_budget():
    model = tiny("decoder", n_layers=5, vocab_size=400)
    ids = list(range(5, 17))
    chosen = explorer_data(model, ids, tokens=[str(i) for i in ids], vocab_label=str, layers=[4, 1],
                           max_new_tokens=1)
    assert chosen["attention"]["decoder"]["layers"] == [1, 4] and chosen["notes"] == []
    with pytest.raises(ValueError, match=r"html_layers=\[7\].*layers 0\.\.4"):
        explorer_data(model, [5], tokens=["5"], vocab_label=str, layers=[7])


def test_page_is_self_contained_and_data_cannot_close_its_script():
    model = tiny("decoder")
    title = 'evil </script><script>alert(1)</script> 한국어'
    html = render(explorer_data(model, [5, 6], tokens=["a", "b"], vocab_label=str, title=title,
                                max_new_tokens=1))
    assert page_data(html)["title"] == title
    assert not re.search(r"<script[^>]+src=|<link|@import|url\(|fetch\(|XMLHttpRequest|https://", html)
    assert "__DATA__" not in html and "/*__SCRIPT__*/" not in html and html.startswith("<!DOCTYPE html>")


def test_no_less_than_sign_reaches_the_data_element():
    """`<!--<script` in the data would put the HTML parser in its "double escaped" state, where the data
    element's own </script> no longer ends it and the page's script is swallowed (a blank page, no error):
    every `<` in the embedded JSON is written as \\u003c, so the data element holds no `<` at all."""
    text = "a <!--<script b </script> c <!-- d"
    html = render(explorer_data(tiny("decoder"), [5, 6], tokens=[text, "<b>"], vocab_label=str, title=text,
                                source=text, max_new_tokens=1))
    body = re.search(r'<script type="application/json" id="zoo-data">(.*?)</script>', html, re.S).group(1)
    assert "<" not in body and "\\u003c!--\\u003cscript" in body
    data = page_data(html)
    assert data["title"] == data["source"] == text and data["tokens"]["decoder"][0]["label"] == text
    # the data element and the page's script
    assert html.count("<script") == 2 and html.count("</script>") == 2


def test_vocab_labels_decode_whole_characters():
    from zoo.data import TOKENIZERS

    tok = TOKENIZERS["bpe"](["고양이가 매트 위에 앉았다 the cat"] * 20, vocab_size=300)
    label = vocab_labeller(tok)
    ids = tok.encode("고양이가 the")
    assert "".join(label(i) for i in ids).replace("·", " ") == "고양이가 the"
    assert label(tok.eos_id) == tok.hf.id_to_token(tok.eos_id)
    assert vocab_labeller(None, {7: "cat"})(7) == "cat" and vocab_labeller(None)(9) == "#9"


def test_inspect_model_html_key_writes_the_page(tmp_path):
    from hydra import compose, initialize_config_dir
    from rich.console import Console

    import inspect_model

    page = tmp_path / "explorer.html"
    overrides = ["model=gpt_nano", "text=the cat sat on the mat", f"html={page}", "html_beams=2",
                 "html_new_tokens=3", "html_layers=[1]", "plots=false"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("inspect_model", overrides=overrides)
    files = inspect_model.inspect(cfg, tmp_path, Console(width=140, file=open(tmp_path / "out.txt", "w")))
    assert page in files
    data = page_data(page.read_text(encoding="utf-8"))
    assert [t["label"] for t in data["tokens"]["decoder"]] == "the cat sat on the mat".split()
    assert data["attention"]["decoder"]["layers"] == [1] and len(data["beams"]["hypotheses"]) == 3
    assert "NO tokenizer" in data["source"]


def test_inspect_model_page_is_at_most_html_max_mb(tmp_path):
    """html_max_mb=0.05 with gpt_nano and 30 words: the file written is at most 50,000 bytes (the template,
    masks and notes counted too), and the page lists what it left out."""
    from hydra import compose, initialize_config_dir
    from rich.console import Console

    import inspect_model

    page = tmp_path / "explorer.html"
    text = " ".join(f"w{i % 17}" for i in range(30))
    overrides = ["model=gpt_nano", f"text='{text}'", f"html={page}", "html_max_mb=0.05", "html_new_tokens=2",
                 "plots=false"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("inspect_model", overrides=overrides)
    inspect_model.inspect(cfg, tmp_path, Console(width=140, file=open(tmp_path / "out.txt", "w")))
    assert page.stat().st_size <= 50_000
    notes = page_data(page.read_text(encoding="utf-8"))["notes"]
    assert notes and all("html_max_mb=0.05" in n for n in notes)


@pytest.mark.parametrize("override, message", [("html_beams=0", "html_beams must be an integer >= 1"),
                                               ("html_max_mb=0", "html_max_mb must be a size in MB > 0"),
                                               ("html=.", "must name the HTML file to write")])
def test_inspect_model_rejects_bad_html_keys_before_building(override, message, tmp_path):
    from hydra import compose, initialize_config_dir

    import inspect_model

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("inspect_model", overrides=["model=gpt_nano", f"html={tmp_path / 'x.html'}", override])
    with pytest.raises(ValueError, match=message):
        inspect_model.check_options(cfg)


def test_moe_layers_show_each_tokens_experts_per_stream():
    model = tiny("encoder_decoder", encoder_layers=2, decoder_layers=1,
                 ffn={"name": "moe", "n_experts": 4, "top_k": 2},
                 layer_pattern=["dense", "moe"])  # MoE: encoder layer 1, no decoder layer
    src, dec = [5, 6, 7, 8, 9], [model.config.start_id, 10, 11]
    data = explorer_data(model, src, tokens=list("abcde"), vocab_label=str, decoder_ids=dec, num_beams=2,
                         max_new_tokens=2)
    [layer] = data["experts"]
    assert (layer["layer"], layer["stream"], layer["n_experts"]) == ("encoder.1", "encoder", 4)
    with torch.no_grad():  # the same routing by hand: the layer's input is the traced norm_ffn output
        model.encode(torch.tensor([src]), None)
        routing = model.encoder_stack.layers[1].ffn.last
    assert layer["experts"] == routing.experts.tolist() and len(layer["experts"]) == len(src)
    assert all(len(set(chosen)) == 2 for chosen in layer["experts"])
    np.testing.assert_allclose(np.array(layer["weights"]).sum(-1), 1.0, atol=2e-3)  # Mixtral: sums to 1
    dense = explorer_data(tiny("decoder"), [5, 6], tokens=["x", "y"], vocab_label=str, num_beams=2,
                          max_new_tokens=2)
    assert dense["experts"] == []
