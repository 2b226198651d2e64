"""ModernBERT import/export parity against transformers' ModernBertForMaskedLM and ModernBertModel: pre-norm
without layer 0's attention norm, GeGLU, no biases, global layers 0, 3 (RoPE base 1e4 here) and local ones
within local_attention // 2 = 4 tokens on either side (base 100), on right-padded batches of 20 tokens (longer
than the window). Every weight is perturbed."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers
from transformers import (
    ModernBertConfig,
    ModernBertForMaskedLM,
    ModernBertForMultipleChoice,
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    ModernBertModel,
)

import zoo
from tests.pretrained.classify_run import train_classifier_from
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved
from zoo.config import ModelConfig
from zoo.finetune.setup import build_model, plan_init, read_init
from zoo.pretrained import FAMILIES
from zoo.pretrained.roundtrip import effective
from zoo.tasks import TASKS

LOCAL, GLOBAL = "sliding_attention", "full_attention"
SHAPE = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=6, num_attention_heads=4, vocab_size=99,
             max_position_embeddings=64, local_attention=8, global_rope_theta=1e4, local_rope_theta=100.0,
             pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)


def tiny(cls=ModernBertForMaskedLM, **kw):
    return perturbed(cls(ModernBertConfig(**{**SHAPE, **kw})), scale=0.2)


def outputs(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask) if not isinstance(model, zoo.models.ZooModel) \
            else model(ids, attention_mask=mask)
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out.last_hidden_state


def same_outputs(hf, model, vocab: int = 99) -> None:
    """Right-padded rows of 20, 14 and 7 tokens: every real position within 1e-4."""
    ids, mask = right_padded(3, 20, vocab, [20, 14, 7])
    real = mask.bool()
    assert (outputs(model, ids, mask)[real] - outputs(hf, ids, mask)[real]).abs().max() < 1e-4


def test_mlm_logits_match(tmp_path):
    hf = tiny()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.arch, c.norm_placement, c.first_attn_norm, c.embed_norm, c.bias, c.activation) == (
        "encoder", "pre", False, True, False, "geglu")
    rope = c.positional
    assert (c.mixer.sliding_window, c.layer_pattern.to_data(), rope.base, rope.local_base) == (
        4, ["global", "local", "local"], 1e4, 100.0)
    assert (c.head.name, c.head.transform, c.head.bias, c.tie_embeddings) == ("lm", True, True, True)
    assert [c.layer_is_local(i) for i in range(6)] == [t == LOCAL for t in hf.config.layer_types]
    same_outputs(hf, model)


def test_layer_types_of_no_period_load_and_match(tmp_path):
    """Layers 1 and 2 global, the rest local (zoo refused a pattern other than every k-th layer global before
    model.layer_pattern): the same layers local, outputs equal, and the export writes them back."""
    types = [LOCAL, GLOBAL, GLOBAL, LOCAL, LOCAL, LOCAL]
    hf = tiny(layer_types=types)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert [model.config.layer_is_local(i) for i in range(6)] == [t == LOCAL for t in types]
    same_outputs(hf, model)
    out, back = export_round_trip(model, ModernBertForMaskedLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["layer_types"] == types and "global_attn_every_n_layers" not in written
    same_outputs(back, model)


def test_each_setting_really_acts_here(tmp_path):
    """The window (off by one), the local base, which layers are global and layer 0's missing norm each move
    these logits far past the tolerance."""
    path = saved(tiny(), tmp_path)
    ids, mask = right_padded(3, 20, 99, [20, 14, 7])
    logits = outputs(zoo.from_pretrained(path), ids, mask)
    for knob in ({"mixer": {"sliding_window": 5}}, {"mixer": {"sliding_window": 3}},
                 {"positional": {"local_base": None}}, {"layer_pattern": ["local", "local", "global"]}):
        changed = outputs(zoo.from_pretrained(path, **knob), ids, mask)
        assert (changed - logits).abs().max() > 0.1, knob


def test_bare_model_hidden_states_match(tmp_path):
    hf = tiny(ModernBertModel)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == "none"
    same_outputs(hf, model)


def test_other_activations_untied_head_without_bias_and_another_pattern(tmp_path):
    """tanh-GELU gates, a SiLU head, an untied decoder without bias, layer_types of another k (every 2nd),
    and biases everywhere (attention, MLP, norms, head dense)."""
    biases = dict(attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True)
    hf = tiny(hidden_activation="gelu_pytorch_tanh", classifier_activation="silu", tie_word_embeddings=False,
              decoder_bias=False, global_attn_every_n_layers=2, **biases)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.activation, c.head.activation, c.tie_embeddings, c.head.bias, c.bias) == (
        "geglu_tanh", "silu", False, False, True)
    assert c.layer_pattern.to_data() == ["global", "local"]
    same_outputs(hf, model)
    export = zoo.save_pretrained(model, tmp_path / "export")
    same_outputs(ModernBertForMaskedLM.from_pretrained(export).eval(), model)


@pytest.mark.parametrize("cls", [ModernBertForMaskedLM, ModernBertModel], ids=["mlm", "bare"])
def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path, cls):
    model = zoo.from_pretrained(saved(tiny(cls), tmp_path))
    out, hf = export_round_trip(model, cls, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["architectures"], written["layer_types"], written["local_attention"]) == (
        [cls.__name__], [GLOBAL, LOCAL, LOCAL] * 2, 8)
    assert (written["global_attn_every_n_layers"], written["global_rope_theta"]) == (3, 1e4)
    assert written["rope_parameters"] == {GLOBAL: {"rope_type": "default", "rope_theta": 1e4},
                                          LOCAL: {"rope_type": "default", "rope_theta": 100.0}}
    same_outputs(hf, model)


@pytest.mark.parametrize(("pattern", "n_layers"), [(["global", "local", "local"], 6),
                                                   (["local", "local", "global"], 6),
                                                   (["global", "local", "local"], 2)])
def test_preset_exports_and_loads_in_transformers(tmp_path, pattern, n_layers):
    """A zoo-built (not imported) model of the base preset's knobs, shrunk and perturbed; with layers 2, 5,
    ... global transformers 5 still reads it, through layer_types; two layers (global, local) too."""
    model = zoo.build("modernbert_base", vocab_size=64, d_model=32, n_layers=n_layers, n_heads=4, d_ff=24,
                      mixer={"sliding_window": 3}, max_seq_len=64, layer_pattern=pattern).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    out = zoo.save_pretrained(model, tmp_path / "fresh")
    assert json.loads((out / "config.json").read_text())["local_attention"] == 6
    same_outputs(ModernBertForMaskedLM.from_pretrained(out).eval(), model, vocab=64)


def test_published_config_reads_as_the_preset():
    """answerdotai/ModernBERT-base's config.json (written by transformers 4.47: global_attn_every_n_layers,
    global_rope_theta / local_rope_theta, no layer_types) loads as the modernbert_base preset with its
    tokenizer's special ids."""
    published = {"architectures": ["ModernBertForMaskedLM"], "attention_bias": False,
                 "attention_dropout": 0.0, "bos_token_id": 50281, "classifier_activation": "gelu",
                 "classifier_bias": False,
                 "classifier_dropout": 0.0, "classifier_pooling": "mean", "cls_token_id": 50281,
                 "decoder_bias": True, "deterministic_flash_attn": False, "embedding_dropout": 0.0,
                 "eos_token_id": 50282, "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0,
                 "gradient_checkpointing": False, "hidden_activation": "gelu", "hidden_size": 768,
                 "initializer_cutoff_factor": 2.0, "initializer_range": 0.02, "intermediate_size": 1152,
                 "layer_norm_eps": 1e-05, "local_attention": 128, "local_rope_theta": 10000.0,
                 "max_position_embeddings": 8192, "mlp_bias": False, "mlp_dropout": 0.0,
                 "model_type": "modernbert", "norm_bias": False, "norm_eps": 1e-05, "num_attention_heads": 12,
                 "num_hidden_layers": 22, "pad_token_id": 50283, "position_embedding_type": "absolute",
                 "sep_token_id": 50282, "tie_word_embeddings": True, "torch_dtype": "float32",
                 "transformers_version": "4.47.0.dev0", "vocab_size": 50368}
    preset = ModelConfig.from_dict({**zoo.presets.preset_dict("modernbert_base"), "pad_id": 50283,
                                    "bos_id": 50281, "eos_id": 50282})
    assert effective(FAMILIES.get("modernbert")().config_from_hf(published)) == effective(preset)


BASE = {"model_type": "modernbert", "hidden_size": 32, "num_hidden_layers": 6, "num_attention_heads": 4,
        "intermediate_size": 40, "vocab_size": 99, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def test_settings_zoo_cannot_reproduce_are_named_in_one_error():
    settings = {"mlp_bias": True, "norm_bias": True, "hidden_activation": "relu",
                "layer_types": [LOCAL, GLOBAL, GLOBAL, LOCAL, LOCAL, "chunked_attention"],
                "rope_parameters": {GLOBAL: {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
                                    LOCAL: {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e2}}}
    with pytest.raises(ValueError) as err:
        FAMILIES.get("modernbert")().config_from_hf({**BASE, **settings})
    message = str(err.value)
    assert message.startswith("modernbert config.json uses settings zoo does not support: ")
    for named in ("hidden_activation='relu'", "mlp_bias == attention_bias=False",
                  "norm_bias == attention_bias=False", f"layer_types in ({LOCAL}, {GLOBAL})=False",
                  "rope_type='linear' (supported: default)",
                  f"{LOCAL} rope_type='dynamic' (supported: default)"):
        assert named in message, named



@pytest.mark.parametrize("local", [None, "128", 0, True])
def test_a_local_attention_that_is_not_a_window_is_named(local):
    """null or text failed as a TypeError inside the reader (`None // 2`); 0 as a sliding_window error."""
    with pytest.raises(ValueError,
                       match=rf"support: local_attention={local!r} \(supported: 'an integer >= 2'\)\.$"):
        FAMILIES.get("modernbert")().config_from_hf({**BASE, "local_attention": local})

LABELS = {"0": "neg", "1": "mid", "2": "pos"}
HEADED = {  # transformers class, its config, the zoo head and model.head.pool, the outputs compared
    "seq-cls": (ModernBertForSequenceClassification, {"classifier_pooling": "cls", "id2label": LABELS},
                "classifier", None, ("logits",)),
    "seq-mean": (ModernBertForSequenceClassification,
                 {"classifier_pooling": "mean", "id2label": LABELS, "classifier_activation": "silu"},
                 "classifier", "mean", ("logits",)),
    "token": (ModernBertForTokenClassification, {"id2label": LABELS}, "token_classifier", None, ("logits",)),
    "qa": (ModernBertForQuestionAnswering, {}, "qa", None, ("start_logits", "end_logits")),
}


def head_outputs(model, ids, mask, fields):
    """The compared outputs, each (B, ...) with the padded positions of per-token outputs left out."""
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask) if not isinstance(model, zoo.models.ZooModel) \
            else model(ids, attention_mask=mask)
    real = mask.bool()
    return [getattr(out, f)[real] if getattr(out, f).dim() > 1 and getattr(out, f).shape[1] == ids.shape[1]
            else getattr(out, f) for f in fields]


def same_head_outputs(hf, model, fields) -> None:
    ids, mask = right_padded(3, 20, 99, [20, 14, 7])
    for ours, theirs in zip(head_outputs(model, ids, mask, fields), head_outputs(hf, ids, mask, fields),
                            strict=True):
        assert (ours - theirs).abs().max() < 1e-4


@pytest.mark.parametrize("case", list(HEADED))
def test_classifier_classes_load_and_export_with_equal_outputs(tmp_path, case):
    """Sequence (cls and mean pooling, a SiLU head), token classification and QA: the dense + activation +
    LayerNorm before the classifier is zoo's model.head.dense; outputs within 1e-4 on right-padded rows, then
    the zoo export loads in transformers with the same outputs and the same label names."""
    cls, kw, head, pool, fields = HEADED[case]
    hf = tiny(cls, **kw).eval()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.head.name, c.head.dense, getattr(c.head, "pool", None)) == (head, True, pool)
    assert c.head.activation == ("silu" if case == "seq-mean" else "gelu")
    same_head_outputs(hf, model, fields)
    out = zoo.save_pretrained(model, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["architectures"] == [cls.__name__]
    back = cls.from_pretrained(out).eval()
    same_head_outputs(back, model, fields)
    if "id2label" in kw:
        assert back.config.id2label == {int(k): v for k, v in LABELS.items()}
    if cls is ModernBertForSequenceClassification:
        assert written["classifier_pooling"] == kw["classifier_pooling"]


def test_pooling_and_the_dense_head_really_act_here(tmp_path):
    """Mean against first-position pooling moves the logits far past the tolerance (so the parity above
    checks which one is used)."""
    path = saved(tiny(ModernBertForSequenceClassification, classifier_pooling="mean", num_labels=3), tmp_path)
    ids, mask = right_padded(3, 20, 99, [20, 14, 7])
    logits = outputs(zoo.from_pretrained(path), ids, mask)
    first = outputs(zoo.from_pretrained(path, head={"pool": "first"}), ids, mask)
    assert (first - logits).abs().max() > 0.1


def test_last_token_pooling_cannot_be_exported(tmp_path):
    model = zoo.build("modernbert_base", vocab_size=64, d_model=32, n_layers=3, n_heads=4, d_ff=24,
                      head={"name": "classifier", "num_labels": 2, "dense": True, "pool": "last"})
    with pytest.raises(ValueError, match=r"model.head.pool='last' \(would load as 'first'\)"):
        zoo.save_pretrained(model, tmp_path / "x", model_type="modernbert")


def test_multiple_choice_is_refused_with_the_reason(tmp_path):
    path = saved(tiny(ModernBertForMultipleChoice), tmp_path)
    with pytest.raises(ValueError, match=r"ModernBertForMultipleChoice: zoo has no multiple-choice head"):
        zoo.from_pretrained(path)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"first_attn_norm": True}, r"model.first_attn_norm=True \(would load as False\)"),
    ({"norm_placement": "sandwich"}, r"model.norm_placement='sandwich' \(would load as 'pre'\)"),
    ({"positional": {"scaling": {"name": "linear", "factor": 2.0}}},
     r"model.positional.scaling='linear' \(would load as 'none'\)"),
    ({"norm": "rmsnorm"}, r"model.norm='rmsnorm' \(would load as 'layernorm'\)"),
])
def test_export_names_what_modernbert_cannot_express(tmp_path, overrides, message):
    model = zoo.build("modernbert_base", vocab_size=64, d_model=32, n_layers=6, n_heads=4, d_ff=24,
                      **overrides)
    with pytest.raises(ValueError, match=rf"cannot be exported as 'modernbert'.*{message}"):
        zoo.save_pretrained(model, tmp_path / "x", model_type="modernbert")


@pytest.mark.e2e  # importing sentence-transformers alone takes seconds
def test_sentence_transformers_modernbert_embedder_encodes_as_sentence_transformers(tmp_path):
    """A ModernBERT embedder folder (bare ModernBertModel + mean Pooling, saved by sentence-transformers):
    zoo.embed's vectors equal SentenceTransformer.encode's, texts up to 128 tokens against a window of 4."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    from tests.pretrained.shipped import WORDS, wordpiece_tokenizer
    from zoo.embedding import load_embedder

    base = tmp_path / "base"
    wordpiece_tokenizer(base)
    vocab = len(json.loads((base / "tokenizer.json").read_text())["model"]["vocab"])
    tiny(ModernBertModel, vocab_size=vocab, max_position_embeddings=160).save_pretrained(base)
    word = Transformer(str(base), max_seq_length=128)
    SentenceTransformer(modules=[word, Pooling(32, "mean")], device="cpu").save(str(tmp_path / "st"))
    texts = ["the cat sat on the mat", "one", " ".join(WORDS[i % len(WORDS)] for i in range(150)),
             "a big red dog ran very quickly under the small blue house"]
    reference = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts, convert_to_tensor=True)
    ours = load_embedder(tmp_path / "st").encode(texts, batch_size=3)
    assert (ours - reference).abs().max() < 1e-4


def modernbert_folder(shipped, tmp_path, **kw):
    """A ModernBertForMaskedLM folder (classifier_pooling mean) with a WordPiece tokenizer that fits its 99
    rows."""
    folder = saved(tiny(classifier_pooling="mean", **kw), tmp_path, "modernbert-mlm")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(shipped.sentence_transformers() / name, folder / name)
    return folder


def test_init_from_a_masked_lm_folder_builds_the_classifier_as_modernbert_does(shipped, tmp_path):
    """task=classification from a ModernBertForMaskedLM folder: model.head.dense with the folder's pooling and
    activation; its `head.dense` / `head.norm` are reused (transformers' classifier class reads the same
    tensors), only the projection is new; the model exports as ModernBertForSequenceClassification with
    equal logits."""
    folder = modernbert_folder(shipped, tmp_path)
    plan = plan_init({"init_from": str(folder), "model": {}}, TASKS.get("classification").head)
    c = plan.model
    assert (c.head.name, c.head.dense, c.head.pool, c.head.activation) == ("classifier", True, "mean", "gelu")
    assert not hasattr(c.head, "transform")  # the masked-LM head's key went with it
    config = c.with_head(num_labels=2)
    model, applied = build_model(plan, read_init(plan, tmp_path).state, config, {"name": "full"})
    assert applied.description.endswith("new (trained from scratch): head.proj.bias, head.proj.weight")
    mlm = ModernBertForMaskedLM.from_pretrained(folder)
    assert torch.equal(model.head.transform.weight, mlm.head.dense.weight)
    out = zoo.save_pretrained(model.eval(), tmp_path / "export", label_names=["no", "yes"])
    hf = ModernBertForSequenceClassification.from_pretrained(out).eval()
    assert hf.config.id2label == {0: "no", 1: "yes"}
    same_head_outputs(hf, model, ("logits",))


@pytest.mark.e2e
def test_train_classification_from_a_modernbert_folder_and_export_it(shipped, tmp_path, capsys):
    """The whole path of `python train.py init_from=<ModernBERT folder> task=classification`: it trains (mean
    pooling, the reused dense head), names the new tensors, and exports as ModernBertForSequenceClassification
    with the data's label names and zoo's logits."""
    folder = modernbert_folder(shipped, tmp_path)
    result = train_classifier_from(folder, tmp_path)
    assert "new (trained from scratch): head.proj.bias, head.proj.weight" in capsys.readouterr().out
    assert result.metrics["val/accuracy"] >= 0.9

    out = zoo.export(result.last_checkpoint, tmp_path / "hf", format="hf")
    hf = ModernBertForSequenceClassification.from_pretrained(out).eval()
    assert hf.config.id2label == {0: "animal", 1: "thing"} and hf.config.classifier_pooling == "mean"
    model, _ = zoo.load(result.last_checkpoint)
    ids = transformers.AutoTokenizer.from_pretrained(out)(["the red cat sat on the mat", "a dog"],
                                                          return_tensors="pt", padding=True)
    with torch.no_grad():
        ref = hf(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"]).logits
        got = model(ids["input_ids"], attention_mask=ids["attention_mask"]).logits
    assert (got - ref).abs().max() < 1e-4


@pytest.mark.parametrize(("head", "pool", "cls"), [
    ("classifier", None, ModernBertForSequenceClassification),
    ("classifier", "mean", ModernBertForSequenceClassification),
    ("token_classifier", None, ModernBertForTokenClassification),
    ("qa", None, ModernBertForQuestionAnswering)])
def test_preset_classifiers_are_modernberts_and_export(tmp_path, head, pool, cls):
    """model=modernbert_base with ModernBERT's classifier head (model.head={name: classifier, dense: true,
    pooler: none}; a head named alone takes its defaults since issue 35): the dense head, pooling first or
    mean; zoo-built and perturbed, it exports and transformers' class gives its outputs."""
    labelled = head != "qa"
    part = {"name": head, "dense": True, **({"num_labels": 3} if labelled else {}),
            **({"pooler": "none"} if head == "classifier" else {}), **({"pool": pool} if pool else {})}
    model = zoo.build("modernbert_base", vocab_size=99, d_model=32, n_layers=3, n_heads=4, d_ff=24,
                      mixer={"sliding_window": 3}, max_seq_len=64, head=part).eval()
    assert (model.config.head.dense, model.head.transform is not None) == (True, True)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    out = zoo.save_pretrained(model, tmp_path / "fresh")
    fields = ("start_logits", "end_logits") if head == "qa" else ("logits",)
    same_head_outputs(cls.from_pretrained(out).eval(), model, fields)
