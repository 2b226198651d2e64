"""Artefacts written by an older zoo (tests/fixtures/<commit>/, by tests/fixtures/make_old_artefacts.py) still
load with today's code and give the logits the old code recorded: training checkpoints, zoo and Hugging Face
exports, save_pretrained folders; an old checkpoint evaluates and generates as before, resumes, seeds
init_from and exports again; what a kill in the old publish protocol left is recovered. Two sets: b777160
(before issue 23's redesign) and 96f5d7c (the newest knobs, before issue 35's nested model config)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hydra.core.hydra_config import HydraConfig

import zoo
from zoo.config_moved import MOVED
from zoo.training.run import train

from .fixtures.make_old_artefacts import (
    LM_DATA,
    NO_HF,
    SETS,
    compose_run,
    evaluated,
    generated,
    labelled_file,
    logits,
)

FIXTURES = Path(__file__).parent / "fixtures"
OLD = FIXTURES / "b777160"
TEXT = "def add(a, b):\n    return a + b  # über"
ARTEFACTS = [pytest.param(FIXTURES / commit / kind, id=f"{commit}-{kind}")
             for commit, kinds in SETS.items() for kind in kinds]
HF_ARTEFACTS = [p for p in ARTEFACTS if p.values[0].name not in NO_HF]


def expected(kind: str | Path) -> dict:
    """The record of `kind` (a b777160 kind's name, or any kind's folder)."""
    return torch.load(OLD / kind / "expected.pt", weights_only=True)


def same_logits(model: torch.nn.Module, kind: str | Path, artefact: str) -> None:
    want = expected(kind)
    torch.testing.assert_close(logits(model, want["inputs"]), want[artefact], rtol=1e-5, atol=1e-6)


@pytest.fixture
def run_cfg(tmp_path):
    """run_cfg(overrides, name) -> the config train.py composes (HydraConfig set) for a run under tmp_path."""
    yield lambda overrides, name: compose_run(overrides, tmp_path, name)
    HydraConfig.instance().cfg = None


# The model keys of the old command lines in today's layout (issue 35: each part owns its keys), written by
# hand: a resume compares the run's config with the checkpoint's upgraded one, so these must build the same
# model the old flat keys did.
NEW_LAYOUT = {
    "seq2seq": ["model.positional.layout=half"],
    "yarn": ["model.positional={name:rope,fraction:0.5,scaling:{name:yarn,factor:4.0,original_max_len:4}}"],
    "longrope": ["model.positional={name:rope,fraction:0.75,scaling:{name:longrope,original_max_len:4,"
                 "short_factor:[1.0,1.25,1.5],long_factor:[1.0,2.0,4.0]}}"],
    "gemma3": ["model.mixer={name:attention,qk_norm:true,sliding_window:4}",
               "model.positional={name:rope,base:1000000.0,local_base:10000.0}",
               "model.layer_pattern=[local,global]"],
    "olmo2": ["model.mixer={name:attention,qk_norm:true,qk_norm_scope:all}",
              "model.positional={name:rope,base:500000.0}"],
    "gpt_oss": ["model.mixer={name:attention,sinks:true,sliding_window:4}",
                "model.positional={name:rope,scaling:{name:yarn,factor:4.0,original_max_len:4,truncate:false}}",
                "model.layer_pattern=[local,global]",
                "model.ffn={name:moe,n_experts:4,top_k:2,router_bias:true,balance:{aux:0.004}}"],
    "moe_sparse": ["model.mixer={name:attention,qk_norm:true}", "model.positional=rope",
                   "model.layer_pattern={prefix:[dense],cycle:[moe]}",
                   "model.ffn={name:moe,n_experts:4,top_k:2,router:softmax_topk_norm}"],
    "classifier_mean": ["model.mixer.sliding_window=4", "model.layer_pattern=[global,local]",
                        # the old preset's head_dense / head_pooler, read once the head was a classifier
                        "model.head={name:classifier,pool:mean,dense:true,pooler:none,activation:gelu}"],
}


def _flat_model_key(override: str) -> bool:
    """A `model.<key>=` of the flat layout (or the scheme's name: the new layout writes it with its keys)."""
    key = override.lstrip("+").split("=", 1)[0].removeprefix("model.")
    return key in MOVED or key in ("positional", "ffn") or key.startswith("moe.")


def old_overrides(kind: Path, folder: Path) -> list[str]:
    """The overrides the old run of `kind` (its fixture folder) trained with, its model keys in today's layout
    (NEW_LAYOUT): its data file written again into `folder`, init_from the same set's checkpoint of another
    kind (b777160: lm's, or its HF export)."""
    fill = {"labelled": labelled_file(folder), "lm_hf": kind.parent / "lm" / "export_hf",
            **{name: kind.parent / name / "last.ckpt" for name in SETS[kind.parent.name]}}
    old = [o.format(**fill) for o in SETS[kind.parent.name][kind.name]]
    if kind.name not in NEW_LAYOUT:
        assert not any(map(_flat_model_key, old)), f"{kind.name}: translate its flat model keys in NEW_LAYOUT"
        return old
    new = NEW_LAYOUT[kind.name]
    given = {o.split("=", 1)[0] for o in new}  # the new layout writes these whole (model.head={name: ...})
    return [o for o in old if not _flat_model_key(o) and o.split("=", 1)[0] not in given] + new


@pytest.mark.parametrize("kind", ARTEFACTS)
def test_old_checkpoint_and_exports_load_with_the_recorded_logits(kind):
    model, tok = zoo.load(kind / "last.ckpt")
    same_logits(model, kind, "ckpt")
    exported, exported_tok = zoo.load(kind / "export_zoo")
    same_logits(exported, kind, "export_zoo")
    assert exported_tok.encode(TEXT) == tok.encode(TEXT)
    assert exported_tok.label_names == tok.label_names
    for folder in ("export_hf", "pretrained"):
        if kind.name in NO_HF:  # the old code wrote none: no HF family represents the model
            assert not (kind / folder).exists() and folder not in expected(kind)
        else:
            same_logits(zoo.from_pretrained(kind / folder), kind, folder)


@pytest.mark.parametrize("kind", ARTEFACTS)
def test_old_checkpoint_evaluates_and_generates_as_before(kind, tmp_path):
    want = expected(kind)
    model, _ = zoo.load(kind / "last.ckpt")
    if want["generated"] is not None:
        assert torch.equal(generated(model, want["inputs"]), want["generated"])
    metrics = evaluated(kind / "last.ckpt", old_overrides(kind, tmp_path), tmp_path)
    assert metrics == pytest.approx(want["metrics"], rel=1e-6)


@pytest.mark.parametrize("kind", HF_ARTEFACTS)
def test_old_hf_export_tokenizer_reads_as_the_checkpoints(kind):
    from zoo.tokenizers.hf import load_hf_tokenizer

    _, tok = zoo.load(kind / "last.ckpt")
    hf = load_hf_tokenizer(kind / "export_hf")
    assert (hf.encode(TEXT), hf.vocab_size) == (tok.encode(TEXT), tok.vocab_size)
    assert hf.decode(hf.encode(TEXT)) == tok.decode(tok.encode(TEXT))
    config = json.loads((kind / "export_hf" / "config.json").read_text(encoding="utf-8"))
    assert config["vocab_size"] == tok.vocab_size


@pytest.mark.parametrize("kind", ARTEFACTS)
def test_old_checkpoint_exports_again_to_both_formats(kind, tmp_path):
    ckpt = tmp_path / "old.ckpt"  # a copy: an export folder may not hold its checkpoint
    shutil.copyfile(kind / "last.ckpt", ckpt)
    same_logits(zoo.load(zoo.export(ckpt, tmp_path / "zoo"))[0], kind, "export_zoo")
    if kind.name in NO_HF:  # refused as the old code refused it, naming why, and nothing written
        with pytest.raises(ValueError, match="No Hugging Face family can represent this zoo model"):
            zoo.export(ckpt, tmp_path / "hf", format="hf")
        assert not (tmp_path / "hf").exists()
        return
    same_logits(zoo.from_pretrained(zoo.export(ckpt, tmp_path / "hf", format="hf")), kind, "export_hf")
    assert model_type(tmp_path / "hf") == model_type(kind / "export_hf")  # the old code's family


def model_type(folder: Path) -> str:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))["model_type"]


def test_old_checkpoint_keeps_the_hf_family_it_was_initialised_from():
    """freeze was initialised from the old lm's HF export: its checkpoint names gpt2 for export to write."""
    assert zoo.load(OLD / "freeze" / "last.ckpt")[0].pretrained_family == "gpt2"


@pytest.mark.parametrize("kind", ARTEFACTS)
def test_old_checkpoint_resumes_for_a_step(kind, run_cfg, tmp_path):
    old_step = torch.load(kind / "last.ckpt", weights_only=False)["global_step"]
    steps = old_step + 1
    # b777160's checkpoints do not record their epoch's size, so the resume evaluates at its step; later ones
    # refuse another eval_every (the epochs' batches would differ) and keep the run's
    period = [f"eval_every={steps}"] if kind.parent == OLD else []
    resumed = train(run_cfg([*old_overrides(kind, tmp_path), f"trainer.max_steps={steps}", *period,
                             f"ckpt_path={kind / 'last.ckpt'}"], "resumed"))
    assert torch.load(resumed.last_checkpoint, weights_only=False)["global_step"] == old_step + 1



def test_a_resume_whose_recorded_best_is_gone_finishes_on_its_own_weights(run_cfg, tmp_path):
    """The old checkpoint names its best.ckpt in a temp folder deleted long ago; a resume that validates no
    more (eval_every=3 from step 3 to 4) failed after training, when the test split loaded that path."""
    kind = OLD / "seq2seq"
    with pytest.warns(UserWarning, match=r"best \(/tmp/\w+/runs/seq2seq/\S+/best.ckpt\) no longer exists"):
        resumed = train(run_cfg([*old_overrides(kind, tmp_path), "trainer.max_steps=4", "eval_every=3",
                                 f"ckpt_path={kind / 'last.ckpt'}"], "resumed"))
    assert resumed.best_checkpoint is None and "test/loss" in resumed.metrics
    assert torch.load(resumed.last_checkpoint, weights_only=False)["global_step"] == 4

@pytest.mark.parametrize("source", ["last.ckpt", "export_zoo", "export_hf"])
def test_init_from_an_old_checkpoint_and_exports(source, run_cfg):
    """A step at learning rate 1e-30 (0 is refused) moves no float32 weight, so the new checkpoint has the
    logits of the weights init_from read."""
    run = train(run_cfg([f"init_from={OLD / 'lm' / source}", *LM_DATA, "optim.lr=1e-30",
                         "trainer.max_steps=1", "eval_every=1"], "init"))
    same_logits(zoo.load(run.last_checkpoint)[0], "lm", "ckpt")


def test_an_export_the_old_code_left_swapped_aside_is_put_back(tmp_path):
    """A kill between the old swap's two renames left `.export_zoo.old-*` and no export_zoo: loading the
    export puts the old folder (lm's export) back."""
    folder = shutil.copytree(OLD / "interrupted", tmp_path / "interrupted")
    same_logits(zoo.load(folder / "export_zoo")[0], "lm", "export_zoo")
    assert sorted(p.name for p in folder.iterdir()) == ["expected.pt", "export_zoo", "pretrained"]


def test_a_save_pretrained_the_old_code_left_half_done_reads_and_is_finished(tmp_path):
    """A kill after the old save renamed its weights in left its config pending
    (`.zoo-save-<id>.config.json`): from_pretrained reads it with those weights; the next save clears it."""
    folder = shutil.copytree(OLD / "interrupted", tmp_path / "interrupted") / "pretrained"
    same_logits(zoo.from_pretrained(folder), "interrupted", "pretrained")
    zoo.save_pretrained(zoo.load(OLD / "lm" / "last.ckpt")[0], folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    same_logits(zoo.from_pretrained(folder), "lm", "pretrained")


def test_old_saved_tokenizer_resumes_as_tokenizer_file(run_cfg, tmp_path):
    """The old export's tokenizer folder, given as tokenizer=file, is the checkpoint's tokenizer to resume."""
    overrides = [o for o in old_overrides(OLD / "lm", tmp_path) if not o.startswith("tokenizer")]
    saved = OLD / "lm" / "export_zoo" / "tokenizer"
    resumed = train(run_cfg([*overrides, "tokenizer=file", f"tokenizer.path={saved}", "trainer.max_steps=4",
                             "eval_every=4", f"ckpt_path={OLD / 'lm' / 'last.ckpt'}"], "file"))
    assert torch.load(resumed.last_checkpoint, weights_only=False)["global_step"] == 4
