"""A token_classification / question_answering model trained from scratch with a BERT tokenizer folder
(tokenizer=hf: bos_id is [CLS] 101, eos_id [SEP] 102, the decoder start its [PAD]) exports as the BERT class
of its head, with its label names, and transformers reloads it with the same logits. Was refused: "config.json
cannot express model.bos_id=101 (would load as 1); model.eos_id=102 ...; model.decoder_start_id=0 ..."."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

import zoo
from zoo.presets import resolve_config
from zoo.tasks import get_task
from zoo.tokenizers import load_hf_tokenizer

from ..data.hf_folders import make_bert
from .test_export_labels import checkpoint

TAGS = ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]
CASES = {"token_classification": ("token_classifier", "BertForTokenClassification", TAGS),
         "question_answering": ("qa", "BertForQuestionAnswering", None)}


@pytest.mark.parametrize("task", CASES)
def test_scratch_task_with_a_bert_tokenizer_exports_as_bert(tmp_path, task):
    head, hf_class, labels = CASES[task]
    tokenizer = load_hf_tokenizer(make_bert(tmp_path / "bert"))
    tokenizer.label_names = labels
    config = resolve_config("bert_small", head=head, d_model=32, n_heads=2, n_layers=1, d_ff=64,
                            max_seq_len=48)
    config = get_task(task).model_config(config, tokenizer)
    assert (config.bos_id, config.eos_id, config.start_id) == (101, 102, 0)  # the case the export refused
    torch.manual_seed(0)
    model = zoo.build(config).eval()
    out = zoo.export(checkpoint(tmp_path / "run.ckpt", model, tokenizer, task), tmp_path / "hf", format="hf")

    written = json.loads((out / "config.json").read_text())
    assert written["architectures"] == [hf_class] and written["bos_token_id"] == 101
    if labels:
        assert written["id2label"] == {str(i): name for i, name in enumerate(TAGS)}
    hf = getattr(transformers, hf_class).from_pretrained(out).eval()
    ids = torch.tensor([[101, 120, 130, 140, 102, 0], [101, 150, 160, 102, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        theirs, mine = hf(input_ids=ids, attention_mask=mask), model(ids, attention_mask=mask)
    names = ("logits",) if labels else ("start_logits", "end_logits")
    real = mask.bool()  # padded positions are not compared (either may put anything there)
    for name in names:
        assert (getattr(theirs, name)[real] - getattr(mine, name)[real]).abs().max() < 1e-4, name
    reloaded = zoo.from_pretrained(out)
    assert (reloaded.config.bos_id, reloaded.config.eos_id) == (101, 102)  # zoo reads back what it wrote
