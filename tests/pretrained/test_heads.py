"""Heads as the folder says, for every family x head (tests/pretrained/heads_table.py: CASES): zoo loads the
transformers class the folder names with outputs equal to transformers' (padded batches, every layer's hidden
states; decoders right- and left-padded, encoder-decoders with the encoder's states too), exports it back as
the same class with its label names, and transformers reloads the export with equal outputs. The docs table is
rendered from the same cases."""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import replace

import pytest
import torch
import transformers

import zoo
from tests.pretrained.heads_table import CASES, DOC, FAMILIES, OUTPUTS, REFUSED, SEQ2SEQ_CASES, Case, render
from tests.pretrained.helpers import export_round_trip, right_padded
from tests.pretrained.shipped import NAMED

TOL = 1e-4


def batch(case: Case, config) -> dict[str, torch.Tensor]:
    """Right-padded ids (pads hold pad_token_id, as a tokenizer gives them; real ids from 3 up, never the
    pad), token types where there are, and an encoder-decoder's decoder_input_ids."""
    ids, mask = right_padded(3, 12, config.vocab_size, [12, 8, 5], seed=1)
    pad = config.pad_token_id or 0
    inputs = {"input_ids": ids.masked_fill(mask == 0, pad), "attention_mask": mask}
    if getattr(config, "type_vocab_size", 0) > 1:
        inputs["token_type_ids"] = torch.randint(0, config.type_vocab_size, ids.shape)
    if case.runs.decoder_ids:
        inputs["decoder_input_ids"] = right_padded(3, 7, config.vocab_size, [7, 7, 7], seed=2)[0]
    return inputs


def left_padded(config) -> dict[str, torch.Tensor]:
    """Rows of the same lengths padded on the left, with position_ids = cumsum(mask) - 1 (given to both)."""
    ids, mask = right_padded(3, 12, config.vocab_size, [12, 8, 5], seed=4)
    mask = mask.flip(-1)
    return {"input_ids": ids.masked_fill(mask == 0, config.pad_token_id), "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}


def run(model, inputs):
    """transformers' model or zoo's: both take the same keyword arguments here."""
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True)


def close(ours: torch.Tensor, theirs: torch.Tensor, real: torch.Tensor | None) -> float:
    """The largest difference; per-token outputs at the `real` tokens only when given."""
    diff = (ours - theirs).abs()
    return float((diff[real] if real is not None and diff.shape[:2] == real.shape else diff).max())


def assert_same_outputs(case: Case, got, ref, mask: torch.Tensor | None = None) -> None:
    """Every compared output and every layer's hidden states within TOL (a decoder's per-token outputs at real
    tokens); outputs the class lacks are None."""
    real = mask.bool() if case.runs.real_only else None
    for zoo_field, hf_field in case.compared.items():
        ours, theirs = getattr(got, zoo_field), getattr(ref, hf_field)
        assert (ours is not None
                and ours.shape == theirs.shape), (zoo_field, None if ours is None else ours.shape)
        assert close(ours, theirs, real) < TOL, (zoo_field, close(ours, theirs, real))
    for absent in set(OUTPUTS[case.head]) - set(case.compared):
        assert getattr(got, absent) is None, absent
    for zoo_field, hf_field in case.runs.hidden:
        ours, theirs = getattr(got, zoo_field), getattr(ref, hf_field)
        assert len(ours) == len(theirs), zoo_field
        for layer, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert close(a, b, real) < TOL, f"{zoo_field} of layer {layer}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_loads_as_the_head_and_exports_as_its_class(shipped, case, tmp_path):
    """Columns 2-3 of the table: the head and outputs equal to transformers'; 4-5: the export's class and
    label names, transformers' outputs from it, and zoo -> HF -> zoo exact."""
    with pytest.warns(UserWarning, match=case.warns) if case.warns else nullcontext():
        model = zoo.from_pretrained(shipped.folder(case.family, case.suffix))
    assert model.config.head.name == case.head
    assert getattr(model, "label_names", None) == NAMED.get(case.head)
    reference = shipped.model(case.family, case.suffix)
    inputs = batch(case, reference.config)
    ours = run(model, inputs)
    assert_same_outputs(case, ours, run(reference, inputs), inputs["attention_mask"])
    if case.runs.left_padded:  # a decoder: the same rows padded on the left
        left = left_padded(reference.config)
        assert_same_outputs(case, run(model, left), run(reference, left), left["attention_mask"])

    out, reloaded = export_round_trip(model, getattr(transformers, case.export_class), tmp_path / "export")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [case.export_class]
    names = NAMED.get(case.head)
    if names is not None:
        assert config["id2label"] == {str(i): n for i, n in enumerate(names)}
        assert config["label2id"] == {n: i for i, n in enumerate(names)}
    assert reloaded.config.id2label == reference.config.id2label
    # its names
    exported = replace(case, suffix=case.exports, exports="", outputs=()) if case.exports else case
    assert_same_outputs(exported, ours, run(reloaded, inputs), inputs["attention_mask"])


@pytest.mark.parametrize(("family", "suffix"), REFUSED, ids=lambda v: v)
def test_a_class_transformers_has_and_zoo_does_not_load_is_named_with_why(shipped, tmp_path, family, suffix):
    """BART / T5 sequence classification and QA read the decoder's output (zoo's encoder_decoder carries head
    lm | none); the error names the class, why, and the classes that load."""
    name = FAMILIES[family][2] + suffix
    assert hasattr(transformers, name)
    folder = tmp_path / "folder"
    folder.mkdir()
    config = json.loads((shipped.folder(family, "Model") / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": [name]}))
    with pytest.raises(ValueError) as err:
        zoo.from_pretrained(folder)
    message = str(err.value)
    assert f"architectures=['{name}']" in message and f" {name}: " in message
    if "ForCausalLM" not in name:
        assert message.endswith("zoo's encoder_decoder carries model.head=lm | none.")
    loaded = [case.hf_class for case in SEQ2SEQ_CASES if case.family == family]
    assert all(cls in message for cls in loaded), loaded


def test_every_seq2seq_class_transformers_has_is_a_case_or_refused():
    """The encoder-decoder rows are listed by hand: none of transformers' classes of those families is
    missed."""
    suffixes = ("Model", "ForConditionalGeneration", "MTModel", "EncoderModel", "ForCausalLM",
                "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
    listed = {(c.family, c.suffix) for c in SEQ2SEQ_CASES} | set(REFUSED)
    families = {c.family for c in SEQ2SEQ_CASES}
    missed = [FAMILIES[f][2] + s for f in families for s in suffixes
              if hasattr(transformers, FAMILIES[f][2] + s) and (f, s) not in listed]
    assert not missed


def test_docs_table_is_rendered_from_the_cases():
    assert render() in DOC.read_text(encoding="utf-8"), "run `python -m tests.pretrained.heads_table`"
