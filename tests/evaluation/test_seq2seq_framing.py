"""Seq2seq evaluation frames its sources as training does: with a T5-style Hugging Face tokenizer folder
(built locally, tests/data/hf_folders.py) every source the model generates from is transformers' own encoding
of the source text (`x </s>`) and the training dataset's encoder input; BLEU is sacrebleu's on translations
made here from transformers' encodings. zoo's own tokenizers keep their bare layout (tests/evaluation/
test_tasks.py checks that BLEU against sacrebleu)."""

from __future__ import annotations

import types

import numpy as np
import pytest
import sacrebleu

import zoo
from tests.data.hf_folders import corpus, make_t5
from zoo.data import model_overrides
from zoo.evaluation.run import evaluate
from zoo.tasks import build_data
from zoo.tasks.evaluating import encoder_inputs
from zoo.tokenizers.specials import SpecialTokens

from .conftest import write_checkpoint

transformers = pytest.importorskip("transformers")

MAX_LEN = 64
N = 5


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory):
    return make_t5(tmp_path_factory.mktemp("t5") / "t5")


def _spy_on_generate(monkeypatch, cls) -> list[list[int]]:
    """Record the (unpadded) source ids of every `cls.generate` call."""
    seen: list[list[int]] = []
    original = cls.generate

    def generate(self, input_ids, *args, **kwargs):
        seen.extend(list(row) for row in input_ids)
        return original(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(cls, "generate", generate)
    return seen


def test_t5_sources_are_framed_like_training_and_bleu_is_sacrebleus(t5_folder, tmp_path, make_eval_cfg,
                                                                     monkeypatch):
    pairs = list(zip(corpus(40, seed=2), corpus(40, seed=3), strict=True))
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    data_cfg = {"name": "pairs", "path": str(path), "val_fraction": 0.25}
    tok, dm = build_data(data_cfg, {"name": "hf", "path": str(t5_folder)}, task="seq2seq",
                         max_seq_len=MAX_LEN, batch_size=4, cache_dir=tmp_path / "c")
    overrides = model_overrides(tok)
    model = zoo.build("transformer_tiny", encoder_layers=1, decoder_layers=1, d_model=32, n_heads=2, d_ff=64,
                      max_seq_len=MAX_LEN, dropout=0.0, **overrides)
    ckpt = write_checkpoint(tmp_path / "t5.ckpt", model, "seq2seq", tok)
    seen = _spy_on_generate(monkeypatch, type(model))
    report = evaluate(make_eval_cfg([f"ckpt={ckpt}", "data=pairs", f"data.path={path}",
                                     "data.val_fraction=0.25", "split=val", f"max_examples={N}",
                                     "batch_size=3", "generation.num_beams=2", "generation.max_new_tokens=6",
                                     "output=null"]))
    monkeypatch.undo()
    assert report.metrics["examples"] == N and len(seen) == N  # two generate calls: 3 + 2 sources

    ref = transformers.AutoTokenizer.from_pretrained(t5_folder)
    by_content = {tuple(ref(s, add_special_tokens=False).input_ids): (s, t) for s, t in pairs}
    val = dm.datasets["val"]
    texts = [by_content[tuple(np.asarray(val.src[i]).tolist())] for i in range(N)]
    expected = [ref(s).input_ids for s, _ in texts]  # transformers' encoding with T5's template: `x </s>`
    assert all(ids[-1] == ref.eos_token_id == 1 for ids in expected)
    assert seen == expected
    assert seen == [val[i]["input_ids"].tolist() for i in range(N)]  # the training dataset's encoder inputs

    hyps = [ref.decode(model.generate([ids], num_beams=2, max_new_tokens=6, eos_token_id=1)[0],
                       skip_special_tokens=True) for ids in expected]
    refs = [tok.decode(val.tgt[i]) for i in range(N)]
    assert refs == [t for _, t in texts]
    assert report.metrics["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert report.metrics["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)


def _tokenizer(**ids: int | None) -> types.SimpleNamespace:
    return types.SimpleNamespace(specials=SpecialTokens.plain(**ids))


def test_encoder_inputs_by_hand(t5_folder):
    zoo_like = _tokenizer(pad=0, bos=1, eos=2, unk=3)
    assert encoder_inputs(zoo_like, [[7, 8, 9], []], max_len=2) == [[7, 8], [3]]  # bare; empty -> <unk>
    no_unk = _tokenizer(pad=5, eos=2)
    assert encoder_inputs(no_unk, [[]], max_len=4) == [[5]]  # no unk: the padding id stands in
    from zoo.data import load_hf_tokenizer

    t5 = load_hf_tokenizer(t5_folder)  # </s> = 1 closes every source, also an empty one and a cut one
    assert encoder_inputs(t5, [[], list(range(10, 20))], max_len=4) == [[1], [10, 11, 12, 1]]
