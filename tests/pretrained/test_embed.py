"""zoo.embed / zoo.load_embedder against the sentence-transformers package on folders that package writes
(tests/pretrained/shipped.py: a bare BertModel, a tokenizer.json that stores padding and truncation at 128):
each Pooling mode, Normalize, texts of different lengths in one padded batch, and a text longer than the
folder's max_seq_length; the older folder layout (sentence_bert_config.json, pooling_mode_* flags) and a
default prompt; a plain BertModel folder against transformers; one clear error per bad input."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import zoo
from tests.pretrained.shipped import WORDS
from zoo.embedding import POOLINGS, Embedder, EmbedSettings, load_embedder
from zoo.tokenizers import load_hf_tokenizer

LONG = " ".join(WORDS[i % len(WORDS)] for i in range(170))  # > 128 tokens: cut at max_seq_length
TEXTS = ["the cat sat on the mat", "a big red dog ran very quickly under the small blue house and not slowly",
         "one", "", "The Cat, the DOG: short text.", LONG]
VARIANTS = [("mean", False), ("cls", False), ("mean", True), ("max", False), ("lasttoken", False)]
ZOO_NAME = {"mean": "mean", "cls": "cls", "max": "max", "lasttoken": "last"}


def st_encode(folder, texts, **kwargs) -> torch.Tensor:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_tensor=True, **kwargs)


@pytest.mark.parametrize(("mode", "normalize"), VARIANTS, ids=[f"{m}{'-normalize' * n}" for m, n in VARIANTS])
def test_folder_settings_equal_sentence_transformers_encode(shipped, mode, normalize):
    folder = shipped.sentence_transformers(mode, normalize)
    embedder = load_embedder(folder)
    assert embedder.settings.pooling == ZOO_NAME[mode] and embedder.settings.normalize is normalize
    assert embedder.max_length == 128 and embedder.tokenize(TEXTS).cut == 1  # LONG is cut, the others not
    reference = st_encode(folder, TEXTS)
    ours = embedder.encode(TEXTS, batch_size=4)  # other batches than sentence-transformers': other padding
    assert ours.shape == (len(TEXTS), 32) and ours.dtype == torch.float32
    assert (ours - reference).abs().max() < 1e-5
    if normalize:
        assert torch.allclose(ours.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-6)


@pytest.mark.parametrize(("mode", "normalize"), [("mean", False), ("cls", False), ("mean", True)])
def test_embed_with_the_callers_pooling_equals_sentence_transformers(shipped, mode, normalize):
    """zoo.embed on a model and tokenizer the caller loaded, told the folder's pooling and length."""
    folder = shipped.sentence_transformers(mode, normalize)
    model, tokenizer = zoo.from_pretrained(folder), load_hf_tokenizer(folder)
    ours = zoo.embed(model, tokenizer, TEXTS, pooling=mode, normalize=normalize, max_length=128, batch_size=3)
    assert (ours - st_encode(folder, TEXTS)).abs().max() < 1e-5


def test_older_layout_with_max_seq_length_and_a_default_prompt(shipped, tmp_path):
    """A folder as sentence-transformers 2.x wrote MiniLM: `sentence_transformers.models.*` types, the
    pooling_mode_*_tokens flags, sentence_bert_config.json's max_seq_length (16 here: most texts are cut), a
    Normalize module; plus a default prompt, which encode puts before every text."""
    folder = tmp_path / "minilm-layout"
    shutil.copytree(shipped.sentence_transformers("mean", True), folder)
    modules = json.loads((folder / "modules.json").read_text())
    for module, kind in zip(modules, ("Transformer", "Pooling", "Normalize"), strict=True):
        module["type"] = f"sentence_transformers.models.{kind}"
    modules[0]["path"] = "0_Transformer"  # the oldest layout: the model and tokenizer in a subfolder
    (folder / "0_Transformer").mkdir()
    for file in folder.iterdir():
        if (file.is_file()
                and file.name not in ("modules.json", "config_sentence_transformers.json", "README.md")):
            file.rename(folder / "0_Transformer" / file.name)
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}))
    (folder / "0_Transformer" / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 16, "do_lower_case": True}))
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    config.update(prompts={"query": "query: the ", "document": ""}, default_prompt_name="query")
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))

    embedder = load_embedder(folder)
    assert embedder.settings == EmbedSettings("mean", True, 16, True, "query: the ", folder / "0_Transformer")
    tokenized = embedder.tokenize(TEXTS)  # "query: the " is 9 tokens: three texts no longer fit in 16
    assert tokenized.cut == 3 and max(len(i) for i in tokenized.ids) == 16
    assert (embedder.encode(TEXTS) - st_encode(folder, TEXTS)).abs().max() < 1e-5


def test_plain_model_folder_pools_the_callers_way(shipped, tmp_path):
    """No modules.json: mean pooling unless told, cut at the model's max_seq_len; equal to transformers'
    BertModel hidden states averaged over the attention mask (and its first token for cls)."""
    from transformers import AutoTokenizer

    folder = shutil.copytree(shipped.folder("bert", "Model"), tmp_path / "bert")
    # a BERT tokenizer (vocabulary within the model's)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(shipped.sentence_transformers() / name, folder)
    hf, words = shipped.model("bert", "Model"), AutoTokenizer.from_pretrained(folder)
    texts = TEXTS[:3]
    batch = words(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = hf(**batch).last_hidden_state  # (B, T, C)
    mask = batch["attention_mask"][..., None].float()
    mean = (hidden * mask).sum(1) / mask.sum(1)
    embedder = load_embedder(folder)
    assert embedder.settings.pooling == "mean" and not embedder.settings.normalize
    assert embedder.max_length == hf.config.max_position_embeddings
    assert (embedder.encode(texts) - mean).abs().max() < 1e-5
    assert (load_embedder(folder, pooling="cls").encode(texts) - hidden[:, 0]).abs().max() < 1e-5


def test_last_token_of_a_decoder_in_a_right_padded_batch(shipped, tmp_path):
    """pooling="last" on a bare GPT2Model: each text's last real token, in a batch with right padding, equals
    transformers' last hidden state of that text run alone."""
    import transformers

    from tests.pretrained.helpers import perturbed

    torch.manual_seed(0)
    gpt2 = perturbed(transformers.GPT2Model(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4,
                                                                    vocab_size=99, n_positions=140)))
    gpt2.save_pretrained(tmp_path / "gpt2")
    tokenizer = load_hf_tokenizer(shipped.sentence_transformers())  # any tokenizer whose ids the model holds
    texts = TEXTS[:3]
    ours = zoo.embed(zoo.from_pretrained(tmp_path / "gpt2"), tokenizer, texts, pooling="last")
    words = [tokenizer.specials.frame(tokenizer.encode(t)) for t in texts]
    with torch.no_grad():
        alone = torch.stack([gpt2(torch.as_tensor(ids)[None]).last_hidden_state[0, -1] for ids in words])
    assert len({len(w) for w in words}) == 3  # three lengths: two rows padded
    assert (ours - alone).abs().max() < 1e-5


def test_special_token_text_is_text(shipped):
    """The one stated difference (docs/pretrained.md): "[SEP]" inside a text is text for zoo, as everywhere in
    zoo's tokenizers, and the special token for transformers; texts without such strings give equal ids."""
    from transformers import AutoTokenizer

    folder = shipped.sentence_transformers()
    embedder, words = load_embedder(folder), AutoTokenizer.from_pretrained(folder)
    plain, marked = "the cat sat", "the cat [SEP] sat"
    assert embedder.tokenize([plain]).ids[0].tolist() == words(plain)["input_ids"]
    ours, theirs = embedder.tokenize([marked]).ids[0].tolist(), words(marked)["input_ids"]
    sep = words.sep_token_id
    assert theirs.count(sep) == 2 and ours.count(sep) == 1 and len(ours) > len(theirs)


def test_every_pooling_is_checked_against_sentence_transformers():
    """The registry holds exactly the modes the parity tests above cover."""
    assert POOLINGS.names() == sorted(ZOO_NAME.values())


# ----------------------------------------------------------------------------------------- bad input

def test_unknown_pooling_is_refused_before_the_weights_are_read(shipped):
    with pytest.raises(ValueError,
                       match=r"pooling: Unknown sentence pooling 'avg'\. Allowed: cls, last, max, mean"):
        load_embedder(shipped.sentence_transformers(), pooling="avg")
    folder = shipped.sentence_transformers()
    model, tokenizer = zoo.from_pretrained(folder), load_hf_tokenizer(folder)
    with pytest.raises(ValueError, match=r"Unknown sentence pooling 'meen'\. Did you mean 'mean'\?"):
        zoo.embed(model, tokenizer, ["a"], pooling="meen")


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError,
                       match=f"{tmp_path / 'nope'} is not a folder; expected a Hugging Face"):
        load_embedder(tmp_path / "nope")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m, p: m.insert(2,
                           {"idx": 2, "name": "2", "path": "2_Dense",
                            "type": "sentence_transformers.models.Dense"}),
     r"modules zoo does not run: sentence_transformers\.models\.Dense; zoo\.embed runs Transformer, Pooling"),
    (lambda m, p: p.update(pooling_mode=["cls", "mean"]),
     r"1_Pooling/config\.json asks for pooling \['cls', 'mean'\]; zoo\.embed pools with one of mean, cls"),
    (lambda m, p: p.update(pooling_mode="weightedmean"), r"asks for pooling \['weightedmean'\]"),
])
def test_a_pipeline_zoo_does_not_run_is_refused_by_name(shipped, tmp_path, edit, message):
    folder = tmp_path / "st"
    shutil.copytree(shipped.sentence_transformers(), folder)
    modules = json.loads((folder / "modules.json").read_text())
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    edit(modules, pooling)
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    with pytest.raises(ValueError, match=message):
        load_embedder(folder)


def test_texts_must_be_a_list_of_strings(shipped):
    folder = shipped.sentence_transformers()
    embedder = Embedder(zoo.from_pretrained(folder), load_hf_tokenizer(folder))
    with pytest.raises(TypeError, match=r"texts must be a list of strings, got one str; pass \[text\]"):
        embedder.encode("the cat")
    with pytest.raises(TypeError, match=r"texts\[1\] is a int, not a str"):
        embedder.encode(["the cat", 3])
    with pytest.raises(ValueError, match="batch_size=0 must be an integer >= 1"):
        embedder.encode(["the cat"], batch_size=0)
    assert embedder.encode([]).shape == (0, 32)


def test_an_encoder_decoder_is_refused():
    model = zoo.build("transformer_tiny")
    with pytest.raises(ValueError,
                       match="zoo.embed takes an encoder or a decoder; this model is an encoder-decoder"):
        Embedder(model, tokenizer=None)
