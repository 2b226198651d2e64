"""finetune=qlora's lean load (zoo.finetune.lean) against the eager one (build the float model, load the
init_from weights, quantise): the same NF4 codes and float tensors, and from the same initial adapters the
same adapters after a few AdamW steps and the same logits, for a zoo checkpoint and a Hugging Face folder;
a model the lean load cannot fill (a buffer computed when built) is loaded the eager way, saying so."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from torch import nn

import zoo
from zoo.checkpoint import atomic_torch_save, zoo_section
from zoo.config import ModelConfig
from zoo.finetune.init_from import build_initialised, load_state, open_source
from zoo.finetune.lean import build_lean
from zoo.finetune.methods import apply_finetune
from zoo.finetune.setup import InitPlan, build_model
from zoo.modules.qlora import QLoRALinear
from zoo.tokenizers import TOKENIZERS
from zoo.training.run import train

from .conftest import FAST

NEEDS_BITSANDBYTES = pytest.mark.skipif(find_spec("bitsandbytes") is None,
                                        reason="the qlora extra (pip install 'zoo[qlora]')")
pytestmark = NEEDS_BITSANDBYTES

QLORA = {"name": "qlora", "rank": 4, "alpha": 8.0, "block_size": 32}


def zoo_checkpoint(folder: Path, **model: object) -> Path:
    """A training checkpoint file of a tiny model with random weights (and an optimizer's moments)."""
    tokenizer = TOKENIZERS["char"](["def add(a, b):\n    return a + b\n"])
    torch.manual_seed(0)
    built = zoo.build("gpt_nano", vocab_size=tokenizer.vocab_size, **model)
    path = folder / "model.ckpt"
    moments = {i: {"exp_avg": torch.randn_like(p)} for i, p in enumerate(built.parameters())}
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in built.state_dict().items()},
                       "optimizer_states": [{"state": moments}],
                       "zoo": zoo_section(built.config, "lm", tokenizer)}, path)
    return path


def eager(path: Path, cfg: dict) -> nn.Module:
    """The eager load: the float model built, the weights loaded, then the method applied."""
    source = open_source(str(path))
    model, fresh = build_initialised(source.config(), load_state(source, str(path)), str(path),
                                     source.model_type)
    apply_finetune(model, cfg, fresh)
    return model


def lean(path: Path, cfg: dict) -> tuple[nn.Module, str]:
    """The lean load through build_model, as a run makes it: (model, what the method did)."""
    source = open_source(str(path))
    init = InitPlan(str(path), source, source.config(), True, [])
    model, applied = build_model(init, load_state(source, str(path), lean=True), source.config(), cfg)
    return model, applied.description


def _train(model: nn.Module, batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    model.eval()  # no dropout (GPT-2's config has 0.1): the two models draw no masks
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for ids in batches:
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items() if ".lora_" in k}


@pytest.fixture(params=["zoo checkpoint", "Hugging Face folder"])
def pretrained(request, tmp_path, folders) -> Path:
    return zoo_checkpoint(tmp_path) if request.param == "zoo checkpoint" else folders["gpt2"]


def test_lean_load_gives_the_eager_tensors_and_training(pretrained):
    reference = eager(pretrained, QLORA)
    model, description = lean(pretrained, QLORA)
    assert "loaded layer by layer" in description
    expected, got = reference.state_dict(), model.state_dict()
    assert list(got) == list(expected)
    assert sum(isinstance(m, QLoRALinear) for m in model.modules()) == 8
    for key, tensor in expected.items():
        assert got[key].dtype == tensor.dtype and got[key].shape == tensor.shape, key
        if ".lora_" not in key:  # NF4 codes, absmaxes, biases, embeddings, norms: equal
            assert torch.equal(got[key], tensor), key
    tied = [n for n, _ in reference.named_parameters(remove_duplicate=False)]
    assert [n for n, _ in model.named_parameters(remove_duplicate=False)] == tied  # a tied head stays tied
    assert len(list(model.parameters())) == len(list(reference.parameters()))
    model.load_state_dict({k: v for k, v in expected.items() if k.endswith("lora_A")}, strict=False)
    torch.manual_seed(1)
    batches = [torch.randint(0, reference.config.vocab_size, (4, 12)) for _ in range(3)]
    trained, want = _train(model, batches), _train(reference, batches)
    assert all(v.abs().max() > 0 for k, v in want.items() if k.endswith("lora_B"))  # they did train
    for key, value in want.items():
        torch.testing.assert_close(trained[key], value, atol=1e-6, rtol=0, msg=key)
    with torch.no_grad():
        torch.testing.assert_close(model(batches[0]).logits, reference(batches[0]).logits, atol=1e-6, rtol=0)


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """The address ranges of this process that map `path` (/proc/self/maps)."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == str(path.resolve()):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            ranges.append((start, end))
    return ranges


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads Linux's /proc/self/maps")
def test_a_checkpoint_is_mapped_not_read_and_builds_no_model(tmp_path):
    """The lean weights of a checkpoint file lie in a mapping of the file (read when touched), and no model
    is built to get them; the eager state is a model's own memory; once the lean model is built, the file
    is no longer mapped (nothing of it is held, its optimizer state included)."""
    path = zoo_checkpoint(tmp_path)
    source = open_source(str(path))
    weights = load_state(source, str(path), lean=True)
    assert "loaded" not in source.__dict__  # zoo.loader built no model
    ranges = _mapped_ranges(path)
    assert ranges and all(any(a <= t.data_ptr() < b for a, b in ranges) for t in weights.values())
    eager_state = load_state(open_source(str(path)), str(path))
    assert not any(a <= t.data_ptr() < b for t in eager_state.values() for a, b in _mapped_ranges(path))
    init = InitPlan(str(path), source, source.config(), True, [])
    model, _ = build_model(init, weights, source.config(), QLORA)
    del weights
    assert _mapped_ranges(path) == []  # every tensor placed or quantised, the optimizer state let go
    assert model.embed.tokens.weight.is_contiguous() and not model.embed.tokens.weight.is_meta


def test_a_model_with_a_buffer_computed_when_built_loads_eagerly_and_says_so(tmp_path):
    path = zoo_checkpoint(tmp_path, positional="alibi")
    source = open_source(str(path))
    state = load_state(source, str(path), lean=True)
    why = build_lean(source.config(), state, str(path), None, QLORA)
    assert why == "embed.positional.slopes is a buffer its module computes when built"
    assert state  # left whole for the eager load
    init = InitPlan(str(path), source, source.config(), True, [])
    model, applied = build_model(init, state, source.config(), QLORA)
    assert "loaded layer by layer" not in applied.description
    assert init.notes == [f"the float model is built before it is quantised: {why}"]
    reference = eager(path, QLORA)
    for key, tensor in reference.state_dict().items():
        if ".lora_" not in key:
            assert torch.equal(model.state_dict()[key], tensor), key


def test_a_fresh_head_is_drawn_as_the_model_draws_it(tmp_path):
    """A new classifier head on a checkpoint's body: N(0, init_std) and trained, the body as loaded."""
    path = zoo_checkpoint(tmp_path)
    source = open_source(str(path))
    head = {"name": "classifier", "num_labels": 3}
    cfg = ModelConfig.from_dict({**source.config().to_dict(), "head": head})
    init = InitPlan(str(path), source, cfg, True, [], new_head=True)
    torch.manual_seed(0)
    model, applied = build_model(init, load_state(source, str(path), lean=True), cfg, QLORA)
    assert applied.description.endswith("new (trained from scratch): head.proj.weight")
    head = model.head.proj.weight
    assert head.requires_grad and not head.is_meta
    assert 0.01 < float(head.detach().std()) < 0.03  # init_std 0.02
    reference = eager(path, QLORA)
    for key, tensor in reference.state_dict().items():
        if ".lora_" not in key and not key.startswith("head."):
            assert torch.equal(model.state_dict()[key], tensor), key


@pytest.mark.e2e  # trains
def test_train_py_with_init_from_loads_qlora_lean(make_run_cfg, folders, capsys):
    """train.py's own path (read_init, then build_model) takes the lean load, and the run trains."""
    result = train(make_run_cfg([f"init_from={folders['gpt2']}", "data=text",
                                 f"data.files={folders['corpus']}", *FAST, "trainer.max_steps=2",
                                 "eval_every=2", "finetune=qlora", "finetune.block_size=32",
                                 "finetune.rank=4"]))
    out = capsys.readouterr().out
    assert "their 24,576 base weights in NF4" in out and "loaded layer by layer" in out
    assert result.last_checkpoint is not None
