"""Heads as the folder says, for every encoder family x head (tests/pretrained/heads_table.py: CASES): zoo loads
the transformers class the folder names with outputs equal to transformers' (padded batches, every layer's
hidden states), exports it back as the same class with its label names, and transformers reloads the export
with equal outputs. The docs table is rendered from the same cases."""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import replace

import pytest
import torch
import transformers

import zoo
from tests.pretrained.heads_table import CASES, DOC, OUTPUTS, Case, render
from tests.pretrained.helpers import right_padded
from tests.pretrained.shipped import NAMED

TOL = 1e-4


def batch(case: Case, config) -> dict[str, torch.Tensor]:
    """Right-padded ids (pads hold pad_token_id, as a tokenizer gives them) and token types where there are."""
    ids, mask = right_padded(3, 12, config.vocab_size, [12, 8, 5], seed=1)
    pad = config.pad_token_id or 0
    inputs = {"input_ids": ids.masked_fill(mask == 0, pad), "attention_mask": mask}
    if getattr(config, "type_vocab_size", 0) > 1:
        inputs["token_type_ids"] = torch.randint(0, config.type_vocab_size, ids.shape)
    return inputs


def run_hf(model, inputs):
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True)


def run_zoo(model, inputs):
    with torch.no_grad():
        return model(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                     token_type_ids=inputs.get("token_type_ids"), output_hidden_states=True)


def assert_same_outputs(case: Case, got, ref) -> None:
    """Every compared output and every layer's hidden states within TOL; outputs the class lacks are None."""
    for zoo_field, hf_field in case.compared.items():
        ours, theirs = getattr(got, zoo_field), getattr(ref, hf_field)
        assert ours is not None and ours.shape == theirs.shape, (zoo_field, None if ours is None else ours.shape)
        assert (ours - theirs).abs().max() < TOL, (zoo_field, float((ours - theirs).abs().max()))
    for absent in set(OUTPUTS[case.head]) - set(case.compared):
        assert getattr(got, absent) is None, absent
    assert len(got.all_hidden_states) == len(ref.hidden_states)
    for layer, (ours, theirs) in enumerate(zip(got.all_hidden_states, ref.hidden_states, strict=True)):
        assert (ours - theirs).abs().max() < TOL, f"hidden states of layer {layer}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_loads_as_the_head_and_exports_as_its_class(shipped, case, tmp_path):
    """Columns 2-3 of the table: the head and outputs equal to transformers'; 4-5: the export's class and
    label names, transformers' outputs from it, and zoo -> HF -> zoo exact."""
    with pytest.warns(UserWarning, match=case.warns) if case.warns else nullcontext():
        model = zoo.from_pretrained(shipped.folder(case.family, case.suffix))
    assert model.config.head == case.head
    assert getattr(model, "label_names", None) == NAMED.get(case.head)
    reference = shipped.model(case.family, case.suffix)
    inputs = batch(case, reference.config)
    ours = run_zoo(model, inputs)
    assert_same_outputs(case, ours, run_hf(reference, inputs))

    out = zoo.save_pretrained(model, tmp_path / "export")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [case.export_class]
    names = NAMED.get(case.head)
    if names is not None:
        assert config["id2label"] == {str(i): n for i, n in enumerate(names)}
        assert config["label2id"] == {n: i for i, n in enumerate(names)}
    reloaded = getattr(transformers, case.export_class).from_pretrained(out).eval()
    assert reloaded.config.id2label == reference.config.id2label
    exported = replace(case, suffix=case.exports, exports="", outputs=()) if case.exports else case  # its names
    assert_same_outputs(exported, ours, run_hf(reloaded, inputs))
    again = zoo.from_pretrained(out)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name  # zoo -> HF -> zoo is exact


def test_docs_table_is_rendered_from_the_cases():
    assert render() in DOC.read_text(encoding="utf-8"), "run `python -m tests.pretrained.heads_table`"
