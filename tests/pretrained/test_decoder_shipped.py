"""Decoder and encoder-decoder folders as shipped (tests/pretrained/shipped.py): tied weights that
transformers leaves out of the file, and `init_from=<folder>` through the functions train.py runs (plan_init
-> read_init -> build_model): the task's head is built as the family's class builds it (a decoder's `score`
without bias), fresh where transformers would not load a checkpoint tensor into it, and the run exports as
that class."""

from __future__ import annotations

import shutil

import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file

import zoo
from tests.pretrained.helpers import right_padded
from tests.pretrained.shipped import hf_model
from zoo.finetune.setup import build_model, plan_init, read_init
from zoo.tasks import TASKS


def file_names(folder) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


# (family, class suffix, zoo token table the tied tensor is, tensors of the tied pair left out of the file)
TIED = [
    ("gpt2", "LMHeadModel", "embed.tokens.weight", {"lm_head.weight"}),
    ("gemma", "ForCausalLM", "embed.tokens.weight", {"lm_head.weight"}),
    ("opt", "ForCausalLM", "embed.tokens.weight", {"lm_head.weight"}),
    ("bart", "ForConditionalGeneration", "tgt_embed.tokens.weight",
     {"lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}),
    ("t5", "ForConditionalGeneration", "tgt_embed.tokens.weight",
     {"lm_head.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}),
]


@pytest.mark.parametrize(("family", "suffix", "table", "absent"), TIED,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_tied_weights_left_out_of_the_file_are_the_token_table(shipped, family, suffix, table, absent):
    """transformers 5 stores a tied pair once; zoo ties the head (and both stacks' tables) to the stored one.
    The logits of the same folders equal transformers' in test_heads.py."""
    folder = shipped.folder(family, suffix)
    names = file_names(folder)
    assert not names & absent and len(names) > 10
    model = zoo.from_pretrained(folder)
    state = dict(model.named_parameters(remove_duplicate=False))
    assert state["head.proj.weight"] is state[table]
    if family in ("bart", "t5"):
        assert state["src_embed.tokens.weight"] is state["tgt_embed.tokens.weight"]


def test_a_reward_model_scores_the_last_real_token_as_transformers(tmp_path):
    """A reward model is a *ForSequenceClassification with one label (LABEL_0): one score per sequence, read
    at the last real token of a right-padded batch, exported back with equal scores."""
    hf = hf_model("qwen2", "ForSequenceClassification", num_labels=1, id2label={0: "LABEL_0"},
                  label2id={"LABEL_0": 0})
    hf.save_pretrained(tmp_path / "rm")
    model = zoo.from_pretrained(tmp_path / "rm")
    assert model.config.head.num_labels == 1
    ids, mask = right_padded(3, 10, 99, [10, 7, 3], seed=7)
    ids = ids.masked_fill(mask == 0, hf.config.pad_token_id)
    with torch.no_grad():
        scores = model(ids, attention_mask=mask).logits
        assert (scores.shape == (3, 1)
                and (scores - hf(input_ids=ids, attention_mask=mask).logits).abs().max() < 1e-4)
        again = transformers.Qwen2ForSequenceClassification.from_pretrained(
            zoo.save_pretrained(model, tmp_path / "x"))
        assert (again.eval()(input_ids=ids, attention_mask=mask).logits - scores).abs().max() < 1e-4


def folder_with_tokenizer(shipped, tmp_path, family: str, suffix: str):
    """A copy of the shipped folder with a tokenizer of fewer tokens than its 99 embedding rows."""
    folder = tmp_path / f"{family}-{suffix}"
    shutil.copytree(shipped.folder(family, suffix), folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(shipped.sentence_transformers() / name, folder / name)
    return folder


def init_from(folder, task: str, num_labels: int, tmp_path):
    """The model train.py builds for `task` from `folder`, and the log line naming what is new."""
    plan = plan_init({"init_from": str(folder), "model": {}}, TASKS.get(task).head)
    config = plan.model.with_head(num_labels=num_labels)  # what the data gives
    model, applied = build_model(plan, read_init(plan, tmp_path).state, config, {"name": "full"})
    return model.eval(), applied.description


def test_causal_lm_folder_with_task_classification_gets_a_fresh_score_and_exports(shipped, tmp_path):
    """A LlamaForCausalLM folder and task=classification: the head is LlamaForSequenceClassification's (last
    real token, `score` without bias), new (lm_head is not a score); the run exports as that class and
    transformers gives the same logits on a right-padded batch."""
    folder = folder_with_tokenizer(shipped, tmp_path, "llama", "ForCausalLM")
    model, log = init_from(folder, "classification", 2, tmp_path)
    assert ((model.config.head.name, model.config.head.pooler, model.config.head.proj_bias)
            == ("classifier", "none", False))
    assert log.endswith("new (trained from scratch): head.proj.weight")
    out = zoo.save_pretrained(model, tmp_path / "export", label_names=["no", "yes"])
    hf = transformers.LlamaForSequenceClassification.from_pretrained(out).eval()
    assert hf.config.id2label == {0: "no", 1: "yes"}
    ids, mask = right_padded(3, 10, 99, [10, 6, 2], seed=5)
    ids = ids.masked_fill(mask == 0, hf.config.pad_token_id)
    with torch.no_grad():
        assert (hf(input_ids=ids, attention_mask=mask).logits
                - model(ids, attention_mask=mask).logits).abs().max() < 1e-4


@pytest.mark.parametrize(("family", "reused", "fresh"), [
    ("llama", "score.weight", "head.proj.bias"),  # LlamaForTokenClassification's
                                                  # `score` (with a bias) is that tensor
    ("gpt2", None, "head.proj.bias, head.proj.weight"),  # GPT2ForTokenClassification's is `classifier`
])
def test_a_sequence_classifier_folder_for_token_classification_reuses_only_the_same_tensor(
        shipped, tmp_path, family, reused, fresh):
    folder = folder_with_tokenizer(shipped, tmp_path, family, "ForSequenceClassification")
    model, log = init_from(folder, "token_classification", 3, tmp_path)
    assert (model.config.head.name, model.config.head.proj_bias) == ("token_classifier", True)
    assert log.endswith(f"new (trained from scratch): {fresh}")
    if reused is not None:
        assert torch.equal(model.head.proj.weight, load_file(folder / "model.safetensors")[reused])


@pytest.mark.parametrize(("preset", "head", "hf_class"), [
    ("llama_small", "classifier", "LlamaForSequenceClassification"),
    ("gpt2", "qa", "GPT2ForQuestionAnswering"),
    ("pythia_70m", "token_classifier", "GPTNeoXForTokenClassification"),
])
def test_a_zoo_built_decoder_head_exports_as_the_family_class(tmp_path, preset, head, hf_class):
    """A decoder trained from a preset with a task head (no folder to remember): the family is found by its
    knobs, the class by its head, and transformers gives the same outputs."""
    small = dict(vocab_size=99, d_model=32, n_layers=1, n_heads=4, max_seq_len=32)
    labels = {"num_labels": 3} if head != "qa" else {}
    model = zoo.build(preset, **small, head={"name": head, **labels}).eval()
    out = zoo.save_pretrained(model, tmp_path / "export")
    hf = getattr(transformers, hf_class).from_pretrained(out).eval()
    ids, mask = right_padded(3, 10, 99, [10, 6, 2], seed=6)
    ids = ids.masked_fill(mask == 0, model.config.pad_id)
    with torch.no_grad():
        ours, theirs = model(ids, attention_mask=mask), hf(input_ids=ids, attention_mask=mask)
    field = "start_logits" if head == "qa" else "logits"
    diff = (getattr(ours, field) - getattr(theirs, field)).abs()
    assert float((diff if head == "classifier" else diff[mask.bool()]).max()) < 1e-4  # per token: real tokens


def test_a_decoder_head_its_class_cannot_express_is_refused_naming_the_key(tmp_path):
    """transformers' decoder `score` has no bias: a zoo decoder classifier with one is no
    LlamaForSequenceClassification."""
    model = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, max_seq_len=32,
                      head={"name": "classifier", "num_labels": 2, "proj_bias": True})
    with pytest.raises(ValueError, match=r"'llama'.*model.head.proj_bias=True \(would load as False\)"):
        zoo.save_pretrained(model, tmp_path / "export", model_type="llama")
