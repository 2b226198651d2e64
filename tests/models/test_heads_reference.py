"""Every head against transformers, on tiny models built locally: BertModel (last and all hidden states,
pooler), BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering and
LlamaForSequenceClassification (last non-pad token, no bias, hidden states after the final norm). The weights
are copied into zoo by hand here, tensor by tensor, so the heads are checked apart from zoo.pretrained."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    BertConfig,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    LlamaConfig,
    LlamaForSequenceClassification,
)

import zoo
from tests.pretrained.helpers import perturbed, right_padded

BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, vocab_size=99,
            max_position_embeddings=40, type_vocab_size=2, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)
ZOO_BERT = dict(arch="encoder", vocab_size=99, d_model=32, n_layers=2, n_heads=4, d_ff=48, activation="gelu",
                norm="layernorm", norm_eps=1e-12, norm_placement="post", embed_norm=True,
                positional="learned", type_vocab_size=2, max_seq_len=40, bias=True, dropout=0.0)
LLAMA = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=48, max_position_embeddings=64, pad_token_id=0, tie_word_embeddings=False)
ZOO_LLAMA = dict(arch="decoder", vocab_size=99, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
                 activation="swiglu", norm="rmsnorm", norm_eps=1e-6, positional="rope", max_seq_len=64,
                 bias=False, tie_embeddings=False, pad_id=0, dropout=0.0)
TOL = 1e-5


def bert_body(bert: BertModel) -> dict[str, torch.Tensor]:
    """zoo encoder tensors from a transformers BertModel (embeddings and layers; no head)."""
    e, out = bert.embeddings, {}
    out["embed.tokens.weight"] = e.word_embeddings.weight
    out["embed.positional.table.weight"] = e.position_embeddings.weight
    out["embed.types.weight"] = e.token_type_embeddings.weight
    out["embed.norm.weight"], out["embed.norm.bias"] = e.LayerNorm.weight, e.LayerNorm.bias
    for i, layer in enumerate(bert.encoder.layer):
        p, att = f"encoder_stack.layers.{i}.", layer.attention
        for part in ("weight", "bias"):
            out[p + f"self_attn.qkv.{part}"] = torch.cat([getattr(att.self, n).get_parameter(part)
                                                         for n in ("query", "key", "value")])
            out[p + f"self_attn.o.{part}"] = att.output.dense.get_parameter(part)
            out[p + f"norm_self.{part}"] = att.output.LayerNorm.get_parameter(part)
            out[p + f"ffn.up.{part}"] = layer.intermediate.dense.get_parameter(part)
            out[p + f"ffn.down.{part}"] = layer.output.dense.get_parameter(part)
            out[p + f"norm_ffn.{part}"] = layer.output.LayerNorm.get_parameter(part)
    return out


def llama_body(llama) -> dict[str, torch.Tensor]:
    """zoo decoder tensors from a transformers LlamaModel (q, k, v fused; SwiGLU up = [gate | up])."""
    out = {"embed.tokens.weight": llama.embed_tokens.weight,
           "decoder_stack.final_norm.weight": llama.norm.weight}
    for i, layer in enumerate(llama.layers):
        p, att, mlp = f"decoder_stack.layers.{i}.", layer.self_attn, layer.mlp
        out[p + "self_attn.qkv.weight"] = torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight])
        out[p + "self_attn.o.weight"] = att.o_proj.weight
        out[p + "ffn.up.weight"] = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        out[p + "ffn.down.weight"] = mlp.down_proj.weight
        out[p + "norm_self.weight"] = layer.input_layernorm.weight
        out[p + "norm_ffn.weight"] = layer.post_attention_layernorm.weight
    return out


def zoo_with(config: dict, state: dict[str, torch.Tensor]):
    """A zoo model of `config` holding exactly `state` (every tensor present, none left over)."""
    model = zoo.build(config)
    model.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)
    return model.eval()


def linear(prefix: str, layer: torch.nn.Linear) -> dict[str, torch.Tensor]:
    return {f"{prefix}.weight": layer.weight,
            **({f"{prefix}.bias": layer.bias} if layer.bias is not None else {})}


@pytest.fixture(scope="module")
def batch():
    ids, mask = right_padded(3, 11, 99, [11, 7, 4])
    return ids.masked_fill(mask == 0, 0), mask  # pads are pad_id 0, as a collator writes them


def test_bare_encoder_matches_bert_model(batch):
    ids, mask = batch
    hf = perturbed(BertModel(BertConfig(**BERT), add_pooling_layer=True))
    model = zoo_with({**ZOO_BERT, "head": {"name": "none", "pooler": "tanh"}},
                     {**bert_body(hf), **linear("head.pool", hf.pooler.dense)})
    types = torch.randint(0, 2, ids.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        got = model(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    assert got.logits is None and got.last_hidden_state is got.hidden_states
    torch.testing.assert_close(got.last_hidden_state, ref.last_hidden_state, atol=TOL, rtol=0)
    assert len(got.all_hidden_states) == len(ref.hidden_states) == BERT["num_hidden_layers"] + 1
    for mine, theirs in zip(got.all_hidden_states, ref.hidden_states, strict=True):
        torch.testing.assert_close(mine, theirs, atol=TOL, rtol=0)
    torch.testing.assert_close(got.pooler_output, ref.pooler_output, atol=TOL, rtol=0)


def test_sequence_classifier_default_is_bert_for_sequence_classification(batch):
    """An encoder's classifier by default: first token, tanh pooler, dropout, projection with bias."""
    ids, mask = batch
    hf = perturbed(BertForSequenceClassification(BertConfig(**BERT, num_labels=3)))
    model = zoo_with({**ZOO_BERT, "head": {"name": "classifier", "num_labels": 3}},
                     {**bert_body(hf.bert), **linear("head.pool", hf.bert.pooler.dense),
                      **linear("head.proj", hf.classifier)})
    labels = torch.tensor([2, 0, 1])
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, labels=labels)
        got = model(ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(got.logits, ref.logits, atol=TOL, rtol=0)
    torch.testing.assert_close(got.loss, ref.loss, atol=TOL, rtol=0)


def test_token_classifier_matches_bert_for_token_classification(batch):
    ids, mask = batch
    hf = perturbed(BertForTokenClassification(BertConfig(**BERT, num_labels=5)))
    model = zoo_with({**ZOO_BERT, "head": {"name": "token_classifier", "num_labels": 5}},
                     {**bert_body(hf.bert), **linear("head.proj", hf.classifier)})
    labels = torch.randint(0, 5, ids.shape, generator=torch.Generator().manual_seed(2)).masked_fill(mask == 0,
                                                                                                    -100)
    labels[0, 3] = -100  # a later sub-token of a word
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, labels=labels)
        got = model(ids, attention_mask=mask, labels=labels)
    assert got.logits.shape == (3, 11, 5)
    torch.testing.assert_close(got.logits, ref.logits, atol=TOL, rtol=0)
    torch.testing.assert_close(got.loss, ref.loss, atol=TOL, rtol=0)


def test_qa_matches_bert_for_question_answering(batch):
    """Start/end logits, and the loss with one answer cut off (position T and beyond: not counted)."""
    ids, mask = batch
    hf = perturbed(BertForQuestionAnswering(BertConfig(**BERT)))
    model = zoo_with({**ZOO_BERT, "head": "qa"}, {**bert_body(hf.bert), **linear("head.proj", hf.qa_outputs)})
    start, end = torch.tensor([1, 11, 0]), torch.tensor([4, 30, 2])  # row 1: answer truncated away
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, start_positions=start, end_positions=end)
        got = model(ids, attention_mask=mask, start_positions=start, end_positions=end)
    torch.testing.assert_close(got.start_logits, ref.start_logits, atol=TOL, rtol=0)
    torch.testing.assert_close(got.end_logits, ref.end_logits, atol=TOL, rtol=0)
    assert got.logits.shape == (3, 11, 2)
    torch.testing.assert_close(got.loss, ref.loss, atol=TOL, rtol=0)


@pytest.fixture(scope="module")
def llama_classifier():
    hf = perturbed(LlamaForSequenceClassification(LlamaConfig(**LLAMA, num_labels=3)))
    assert hf.score.bias is None  # decoders' score has no bias: zoo's default on a decoder is the same
    model = zoo_with({**ZOO_LLAMA, "head": {"name": "classifier", "num_labels": 3}},
                     {**llama_body(hf.model), "head.proj.weight": hf.score.weight})
    return hf, model


def test_decoder_classifier_pools_the_last_real_token_as_llama(llama_classifier, batch):
    hf, model = llama_classifier
    ids, mask = batch
    labels = torch.tensor([1, 2, 0])
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, labels=labels, output_hidden_states=True)
        with_mask = model(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
        without_mask = model(ids)  # transformers' own rule: the rightmost token that is not pad_id
    for got in (with_mask, without_mask):
        torch.testing.assert_close(got.logits, ref.logits, atol=TOL, rtol=0)
    torch.testing.assert_close(with_mask.loss, ref.loss, atol=TOL, rtol=0)
    # hidden states as LlamaModel gives them: embeddings, each layer, the last one after the final norm
    assert len(with_mask.all_hidden_states) == len(ref.hidden_states) == LLAMA["num_hidden_layers"] + 1
    for mine, theirs in zip(with_mask.all_hidden_states, ref.hidden_states, strict=True):
        torch.testing.assert_close(mine[mask.bool()], theirs[mask.bool()], atol=TOL, rtol=0)  # real positions


def test_decoder_classifier_with_pad_equal_to_eos_pools_as_llama(llama_classifier, batch):
    """A reward model whose pad token is its eos (common for Llama / Qwen): each text ends in eos, then pads
    of the same id. transformers pools the rightmost token that is not pad_id, so the trailing eos is skipped;
    zoo must pool the same token whether or not it is given the mask that marks that eos as real."""
    hf, model = llama_classifier
    ids, mask = batch
    eos = 0  # == pad_id of both models
    lengths = mask.sum(-1)
    ids = ids.clone()
    ids[torch.arange(3), lengths - 1] = eos  # the last real token of each row is the eos
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        for got in (model(ids, attention_mask=mask).logits, model(ids).logits):
            torch.testing.assert_close(got, ref, atol=TOL, rtol=0)


def test_bare_decoder_hidden_states_match_llama_model(llama_classifier, batch):
    """head=none on the same weights: last_hidden_state is LlamaModel's (after the final norm)."""
    hf, _ = llama_classifier
    ids, mask = batch
    model = zoo_with({**ZOO_LLAMA, "head": "none"}, llama_body(hf.model))
    with torch.no_grad():
        ref = hf.model(input_ids=ids, attention_mask=mask).last_hidden_state
        got = model(ids, attention_mask=mask)
    assert got.logits is None and got.pooler_output is None
    torch.testing.assert_close(got.last_hidden_state[mask.bool()], ref[mask.bool()], atol=TOL, rtol=0)
