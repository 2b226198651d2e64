"""Weight files as they are shipped (tests/pretrained/shipped.py): fp16 / bf16 files and `dtype=`, sharded
safetensors, `pytorch_model.bin` only, tied weights left out of the file, buffers that are not weights, a
sentence-transformers folder, and one clear error for a head class zoo does not know."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors import safe_open

import zoo
from tests.pretrained.helpers import right_padded
from zoo.pretrained.tensor_map import BUFFERS, is_buffer

IDS, MASK = right_padded(2, 10, 99, [10, 6], seed=3)


def logits(model, ids=IDS, mask=MASK):
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits


def file_names(folder) -> set[str]:
    names = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            names |= set(f.keys())
    return names


@pytest.mark.parametrize(("variant", "stored"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_precision_files_load_in_fp32_by_default_and_as_stored_with_auto(shipped, variant, stored):
    folder = shipped.folder("bert", "ForSequenceClassification", variant)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert f.get_tensor("classifier.weight").dtype == stored  # the file really is half precision
    reference = transformers.BertForSequenceClassification.from_pretrained(folder, dtype=torch.float32).eval()
    model = zoo.from_pretrained(folder)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    with torch.no_grad():
        ref = reference(input_ids=IDS, attention_mask=MASK).logits
    assert (logits(model) - ref).abs().max() < 1e-4  # the file's rounded weights, computed in fp32 by both
    auto = zoo.from_pretrained(folder, dtype="auto")
    assert {p.dtype for p in auto.parameters()} == {stored}
    # exact: no rounding twice
    assert torch.equal(auto.head.proj.weight, reference.classifier.weight.to(stored))
    assert {p.dtype
            for p in zoo.from_pretrained(folder, dtype=torch.bfloat16).parameters()} == {torch.bfloat16}


def test_unknown_dtype_is_named_before_reading(tmp_path):
    with pytest.raises(ValueError,
                       match=r"dtype='float8' is not supported; allowed: None \(float32\), 'auto'"):
        zoo.from_pretrained(tmp_path / "not-read", dtype="float8")


def test_sharded_safetensors_load_as_the_single_file(shipped):
    folder = shipped.folder("roberta", "ForTokenClassification", "sharded")
    assert (len(list(folder.glob("model-*.safetensors"))) > 1
            and (folder / "model.safetensors.index.json").is_file())
    single = zoo.from_pretrained(shipped.folder("roberta", "ForTokenClassification"))
    sharded = zoo.from_pretrained(folder)
    for (name, a), (_, b) in zip(single.state_dict().items(), sharded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("suffix", ["ForMaskedLM", "Model"])
def test_pytorch_model_bin_only_as_transformers_4_wrote_it(shipped, suffix):
    """The whole state dict pickled: the tied decoder under its own name and the position_ids buffer."""
    folder = shipped.folder("bert", suffix, "bin")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "pytorch_model.bin"]
    stored = torch.load(folder / "pytorch_model.bin", weights_only=True)
    assert any(k.endswith("embeddings.position_ids") for k in stored)
    model = zoo.from_pretrained(folder)
    reference = zoo.from_pretrained(shipped.folder("bert", suffix))
    for (name, a), (_, b) in zip(reference.state_dict().items(), model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_tied_decoder_absent_from_the_file_is_the_token_table(shipped):
    folder = shipped.folder("distilbert", "ForMaskedLM")
    assert "vocab_projector.weight" not in file_names(folder)  # transformers 5 leaves tied weights out
    model = zoo.from_pretrained(folder)
    assert model.head.proj.weight is model.embed.tokens.weight
    with torch.no_grad():
        ref = shipped.model("distilbert", "ForMaskedLM")(input_ids=IDS, attention_mask=MASK).logits
    assert (logits(model) - ref).abs().max() < 1e-4


def test_bare_model_names_have_no_prefix_and_a_pooler_is_kept_only_when_stored(shipped, tmp_path):
    folder = shipped.folder("bert", "Model")
    names = file_names(folder)
    assert "pooler.dense.weight" in names and not any(n.startswith("bert.") for n in names)
    assert zoo.from_pretrained(folder).config.head.pooler == "tanh"
    transformers.BertModel.from_pretrained(folder,
                                           add_pooling_layer=False).save_pretrained(tmp_path / "no-pooler")
    bare = zoo.from_pretrained(tmp_path / "no-pooler")
    assert bare.config.head.pooler == "none" and not any(k.startswith("head.") for k in bare.state_dict())
    with torch.no_grad():
        out = bare(IDS, attention_mask=MASK)
        ref = shipped.model("bert", "Model")(input_ids=IDS, attention_mask=MASK).last_hidden_state
    assert out.pooler_output is None and (out.last_hidden_state - ref).abs().max() < 1e-4


@pytest.mark.parametrize("name", ["bert.embeddings.position_ids", "embeddings.token_type_ids",
                                  "model.layers.0.self_attn.rotary_emb.inv_freq",
                                  "model.rotary_emb.original_inv_freq",
                                  "transformer.h.3.attn.masked_bias", "gpt_neox.layers.1.attention.bias"])
def test_buffers_on_the_list_are_not_weights(name):
    assert is_buffer(name)


@pytest.mark.parametrize("name",
                         ["bert.embeddings.position_ids_extra", "bert.embeddings.position_embeddings.weight",
                          "transformer.h.0.attn.c_attn.bias", "gpt_neox.layers.0.attention.dense.bias",
                          "encoder.layer.0.attention.output.dense.bias", "rotary_emb.inv_freq.weight"])
def test_weights_are_never_taken_for_buffers(name):
    assert not is_buffer(name)


def test_no_weight_of_a_transformers_model_matches_the_buffer_list():
    """Every stored tensor name (parameters and persistent buffers) of one model per supported
    architecture."""
    tiny = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=32)
    models = [
        transformers.BertForPreTraining(transformers.BertConfig(**tiny)),
        transformers.RobertaForMaskedLM(transformers.RobertaConfig(**tiny)),
        transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(vocab_size=64, dim=16, n_layers=1,
                                                                         n_heads=2, hidden_dim=32)),
        transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2,
                                                             bos_token_id=0, eos_token_id=0)),
        transformers.LlamaForCausalLM(transformers.LlamaConfig(**tiny)),
        transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**tiny)),
        transformers.T5ForConditionalGeneration(transformers.T5Config(vocab_size=64, d_model=16, d_kv=8,
                                                                      d_ff=32, num_layers=1, num_heads=2)),
    ]
    names = [k for m in models for k in m.state_dict()]
    assert len(names) > 100 and not [k for k in names if is_buffer(k)]
    assert len(BUFFERS) == 5  # docs/pretrained.md lists each


def test_buffer_in_the_file_is_ignored_and_an_unknown_tensor_is_an_error(shipped, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "bert"
    transformers.BertForTokenClassification.from_pretrained(
        shipped.folder("bert", "ForTokenClassification")).save_pretrained(folder)
    tensors = load_file(folder / "model.safetensors")
    save_file({**tensors, "bert.embeddings.token_type_ids": torch.zeros(1, 40, dtype=torch.long)},
              folder / "model.safetensors", metadata={"format": "pt"})
    zoo.from_pretrained(folder)  # no error, no warning about a weight
    save_file({**tensors, "bert.embeddings.extra_ids": torch.zeros(1, 40)}, folder / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(ValueError,
                       match="holds 1 tensor.* zoo does not know how to load: bert.embeddings.extra_ids"):
        zoo.from_pretrained(folder)


@pytest.mark.parametrize(("named", "family"), [("BertForMultipleChoice", "bert"), ("BertLMHeadModel", "bert"),
                                               ("RobertaForCausalLM", "roberta"),
                                               ("DistilBertForNextSentencePrediction", "distilbert")])
def test_a_head_class_zoo_does_not_know_is_named_with_the_supported_ones(shipped, tmp_path, named, family):
    folder = tmp_path / "folder"
    folder.mkdir()
    config = json.loads((shipped.folder(family, "Model") / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": [named]}))
    with pytest.raises(ValueError) as err:
        zoo.from_pretrained(folder)
    message = str(err.value)
    assert f"architectures=['{named}']" in message
    assert "ForSequenceClassification" in message and "ForTokenClassification" in message
    assert "ForQuestionAnswering" in message and "Model, " in message


# --------------------------------------------------------------------------------- sentence-transformers

def test_sentence_transformers_folder_loads_as_a_bare_model_with_its_pooler(shipped):
    """The MiniLM case: BertModel, names without `bert.`, a pooler, no masked-LM head, 1_Pooling/, and a
    tokenizer.json that stores padding and truncation at 128."""
    from sentence_transformers import SentenceTransformer

    folder = shipped.sentence_transformers()
    assert (folder / "modules.json").is_file() and (folder / "1_Pooling" / "config.json").is_file()
    stored = json.loads((folder / "tokenizer.json").read_text())
    assert stored["padding"]["strategy"] == {"Fixed": 128} and stored["truncation"]["max_length"] == 128
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["BertModel"]
    names = file_names(folder)
    assert "pooler.dense.weight" in names and not any(n.startswith(("bert.", "cls.")) for n in names)

    model = zoo.from_pretrained(folder)
    assert model.config.head.name == "none" and model.config.head.pooler == "tanh"
    st = SentenceTransformer(str(folder), device="cpu")
    texts = ["the cat sat on the mat",
             "a big red dog ran very quickly under the small blue house and not slowly"]
    features = st.tokenize(texts)
    with torch.no_grad():
        ref = st[0].auto_model(**features)
        out = model(features["input_ids"], attention_mask=features["attention_mask"],
                    token_type_ids=features["token_type_ids"])
    assert (out.last_hidden_state - ref.last_hidden_state).abs().max() < 1e-4
    assert (out.pooler_output - ref.pooler_output).abs().max() < 1e-4
    mask = features["attention_mask"][..., None].float()
    # the folder's 1_Pooling: mean over real tokens
    mean = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    assert (mean - st.encode(texts, convert_to_tensor=True)).abs().max() < 1e-5
